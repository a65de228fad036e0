"""Storages a tier writes to, by URL (``ttl.storage``).

- ``file:///absolute/dir``: a directory on the machine the engine runs on;
  objects are files under it, written whole (temporary name, fsync, rename), so
  a reader never sees half an object.
- ``s3://bucket/prefix?endpoint=http://host:port&region=r``: S3 or an
  S3-compatible object store (pyarrow's S3 client); an object appears whole
  when its upload completes. Credentials come from the standard AWS variables
  (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or profile of
  the engine's environment, or from an AWS credentials file the URL names
  (``credentials_file=/path``, ``profile=name``: a section of it, or of the
  usual shared credentials file), never from the catalog.
- ``postgresql://user@host:port/db?schema=archive``: a table of the same shape in
  another database (pg_ttl.archive.postgres).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlparse

if TYPE_CHECKING:
    from pg_ttl.archive.postgres import PostgresTarget


class StorageError(Exception):
    """A storage cannot be reached, read or written."""


class BaseStorage:
    name: str

    def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def get(self, key: str) -> bytes:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def list(self, prefix: str) -> list[str]:
        raise NotImplementedError

    def verify(self, key: str, data: bytes) -> None:
        """The object ``key`` holds exactly ``data``: read back and compared."""
        back = self.get(key)
        if len(back) != len(data) or hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
            raise StorageError(f'storage "{self.name}": object {key} read back differs from what was written')

    def check(self) -> None:
        """Writable, readable, and deletable: a probe object round trip."""
        key = f".pg-ttl-check-{uuid.uuid4().hex}"
        self.put(key, b"pg_ttl")
        if self.get(key) != b"pg_ttl":
            raise StorageError(f'storage "{self.name}": an object read back differs from what was written')
        self.delete(key)


class LocalDirectory(BaseStorage):
    def __init__(self, name: str, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "file" or not parsed.path.startswith("/"):
            raise StorageError(f'storage "{name}": not a directory URL: {url}')
        self.name = name
        self.root = Path(unquote(parsed.path))

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise StorageError(f'storage "{self.name}": object key {key!r} leaves the directory')
        return path

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".partial-{path.name}-", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise StorageError(f'storage "{self.name}": cannot write {key}: {exc}') from exc

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except OSError as exc:
            raise StorageError(f'storage "{self.name}": cannot read {key}: {exc}') from exc

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f'storage "{self.name}": cannot delete {key}: {exc}') from exc

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (a directory path), temporary files included."""
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file())



class ObjectStore(BaseStorage):
    """An S3 bucket (and key prefix) through pyarrow's S3 client."""

    def __init__(self, name: str, url: str) -> None:
        parsed = urlparse(url)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        self.name = name
        self.root = (parsed.netloc + "/" + parsed.path.strip("/")).rstrip("/")
        try:
            import pyarrow.fs as pafs
        except ImportError as exc:
            raise StorageError("S3 storage uses pyarrow: pip install 'pg-ttl[archive]'") from exc
        options: dict[str, Any] = {"region": query.get("region", "us-east-1"), "connect_timeout": 5.0,
                                   "request_timeout": 30.0,
                                   "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
                                   # a small object in one PutObject, not a multipart upload
                                   "allow_delayed_open": True}
        if "endpoint" in query:
            endpoint = urlparse(query["endpoint"])
            options["endpoint_override"] = endpoint.netloc or endpoint.path
            options["scheme"] = endpoint.scheme or "https"
        if "credentials_file" in query or "profile" in query:
            options.update(self._credentials(query.get("credentials_file"), query.get("profile", "default")))
        self.fs = pafs.S3FileSystem(**options)
        self._pafs = pafs

    def _credentials(self, path: str | None, profile: str) -> dict[str, str]:
        """The keys of ``profile`` in an AWS credentials file (INI: aws_access_key_id,
        aws_secret_access_key, aws_session_token): ``path``, else the shared one
        (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials)."""
        import configparser

        file = Path(path or os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
        parser = configparser.ConfigParser(interpolation=None)
        try:
            with file.open(encoding="utf-8") as f:
                parser.read_file(f)
        except (OSError, configparser.Error) as exc:
            raise StorageError(f'storage "{self.name}": cannot read the credentials file {file}: {exc}') from exc
        if not parser.has_section(profile) or not parser.has_option(profile, "aws_access_key_id") \
                or not parser.has_option(profile, "aws_secret_access_key"):
            raise StorageError(f'storage "{self.name}": the credentials file {file} has no profile "{profile}" with '
                               "aws_access_key_id and aws_secret_access_key")
        keys = {"access_key": parser.get(profile, "aws_access_key_id"),
                "secret_key": parser.get(profile, "aws_secret_access_key")}
        if parser.has_option(profile, "aws_session_token"):
            keys["session_token"] = parser.get(profile, "aws_session_token")
        return keys

    def _path(self, key: str) -> str:
        if ".." in key.split("/"):
            raise StorageError(f'storage "{self.name}": object key {key!r} leaves the prefix')
        return f"{self.root}/{key}"

    def put(self, key: str, data: bytes) -> None:
        try:
            with self.fs.open_output_stream(self._path(key)) as f:
                f.write(data)
        except OSError as exc:
            raise StorageError(f'storage "{self.name}": cannot write {key}: {exc}') from exc

    def verify(self, key: str, data: bytes) -> None:
        """S3 answers with the MD5 of the bytes it received (the ETag of a single PutObject, or
        of a one-part upload: the MD5 of that MD5, "-1"): when it matches ours, nothing needs
        reading back. Else (an encrypted bucket's ETag is no MD5) the object is read back."""
        digest = hashlib.md5(data, usedforsecurity=False)
        expected = {digest.hexdigest(), hashlib.md5(digest.digest(), usedforsecurity=False).hexdigest() + "-1"}
        try:
            with self.fs.open_input_stream(self._path(key)) as f:
                meta = f.metadata()
        except OSError as exc:
            raise StorageError(f'storage "{self.name}": cannot read {key}: {exc}') from exc
        etag = bytes(meta.get("ETag", b"")).decode(errors="replace").strip('"')
        size = bytes(meta.get("Content-Length", b"-1")).decode(errors="replace")
        if size == str(len(data)) and etag in expected:
            return
        super().verify(key, data)

    def get(self, key: str) -> bytes:
        try:
            with self.fs.open_input_stream(self._path(key)) as f:
                return bytes(f.read())
        except OSError as exc:
            raise StorageError(f'storage "{self.name}": cannot read {key}: {exc}') from exc

    def delete(self, key: str) -> None:
        try:
            self.fs.delete_file(self._path(key))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f'storage "{self.name}": cannot delete {key}: {exc}') from exc

    def list(self, prefix: str) -> list[str]:
        try:
            infos = self.fs.get_file_info(self._pafs.FileSelector(self._path(prefix).rstrip("/"), recursive=True,
                                                                  allow_not_found=True))
        except OSError as exc:
            raise StorageError(f'storage "{self.name}": cannot list {prefix}: {exc}') from exc
        return sorted(i.path[len(self.root) + 1:] for i in infos if i.type == self._pafs.FileType.File)



def open_storage(name: str, url: str) -> BaseStorage | PostgresTarget:
    scheme = urlparse(url).scheme.lower()
    if scheme == "file":
        return LocalDirectory(name, url)
    if scheme == "s3":
        return ObjectStore(name, url)
    if scheme in ("postgresql", "postgres"):
        from pg_ttl.archive.postgres import PostgresTarget

        return PostgresTarget(name, url)
    raise StorageError(f'storage "{name}": {scheme or "this"} storage is not supported yet ({url})')
