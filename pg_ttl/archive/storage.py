"""Storages a tier writes to, by URL (``ttl.storage``). ``file:///absolute/dir``:
a directory on the machine the engine runs on; objects are files under it,
written whole (temporary name, fsync, rename), so a reader never sees half an
object."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from urllib.parse import unquote, urlparse


class StorageError(Exception):
    """A storage cannot be reached, read or written."""


class LocalDirectory:
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

    def check(self) -> None:
        """Writable, readable, and deletable: a probe object round trip."""
        key = f".pg-ttl-check-{uuid.uuid4().hex}"
        self.put(key, b"pg_ttl")
        if self.get(key) != b"pg_ttl":
            raise StorageError(f'storage "{self.name}": an object read back differs from what was written')
        self.delete(key)


def open_storage(name: str, url: str) -> LocalDirectory:
    scheme = urlparse(url).scheme.lower()
    if scheme == "file":
        return LocalDirectory(name, url)
    raise StorageError(f'storage "{name}": {scheme or "this"} storage is not supported yet ({url})')
