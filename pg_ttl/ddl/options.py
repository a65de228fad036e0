"""The ``ttl_*`` options of TTL DDL and the checks that need no database.

The database validates every value again (``ttl._validate_policy``); these
checks only let ``pg-ttl rewrite`` refuse what is certainly wrong, with the
file position, before anything runs. When in doubt a value passes and the
database decides.
"""

from __future__ import annotations

import re
from enum import Enum

import pglast
from croniter import croniter
from pglast import ast

PREFIX = "ttl_"


class Kind(Enum):
    INTERVAL = "interval"
    COLUMN = "column"
    EXPRESSION = "expression"
    UNIT = "unit"
    CRON = "cron"
    BOOL = "bool"
    BATCH = "batch"  # integer >= 1
    RATE = "rate"  # integer >= 0, 0 = unlimited
    SHARDS = "shards"  # integer 0..1024, 0 = no expiration queue
    TIERS = "tiers"  # '30 days TO cold, 400 days DELETE'
    PARTITION_ACTION = "partition_action"
    SCHEMA = "schema"
    TABLE = "table"  # a table name, optionally with (columns)
    COLUMNS = "columns"  # comma-separated column names


# The same names, kinds and order as the database's option registry,
# ttl.options (sql/08_options.sql); a test keeps the two equal.
OPTIONS: dict[str, Kind] = {
    "column": Kind.COLUMN,
    "expiration_expression": Kind.EXPRESSION,
    "expire_after": Kind.INTERVAL,
    "unit": Kind.UNIT,
    "job_cron": Kind.CRON,
    "job_cron_override": Kind.BOOL,
    "select_batch_size": Kind.BATCH,
    "delete_batch_size": Kind.BATCH,
    "select_rate_limit": Kind.RATE,
    "delete_rate_limit": Kind.RATE,
    "pause": Kind.BOOL,
    "partition_action": Kind.PARTITION_ACTION,
    "detach_schema": Kind.SCHEMA,
    "strict": Kind.BOOL,
    "value_ttl_overrides_table_ttl": Kind.BOOL,
    "queue_shards": Kind.SHARDS,
    "value_ttls": Kind.BOOL,
    "ignore_value_ttl": Kind.BOOL,
    "archive_batch_size": Kind.BATCH,
}

# The orphan policy's options (docs/orphans.md), set through the same ALTER TABLE
# ... SET (...); the database routes them to ttl.set_orphan_options.
# Storage tiers (docs/tiers.md): the database routes ttl_tiers to ttl.set_tiers.
TIER_OPTIONS: dict[str, Kind] = {"tiers": Kind.TIERS}

ORPHAN_OPTIONS: dict[str, Kind] = {
    "orphan_of": Kind.TABLE,
    "orphan_key": Kind.COLUMNS,
    "orphan_min_age": Kind.INTERVAL,
    "orphan_age_column": Kind.COLUMN,
    "orphan_age_unit": Kind.UNIT,
    "orphan_job_cron": Kind.CRON,
    "orphan_range_bytes": Kind.BATCH,
    "orphan_delete_batch_size": Kind.BATCH,
}

UNITS = ("seconds", "milliseconds", "microseconds", "nanoseconds")
PARTITION_ACTIONS = ("drop", "detach")
CRON_ALIASES = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
INT4_MAX = 2**31 - 1


class OptionError(ValueError):
    """A TTL option that is certainly wrong; the message names the option."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


# ttl.enable's parameter for "column" (a reserved word in SQL), accepted as the same option.
ALIASES = {"column_name": "column"}


def label(key: str) -> str:
    """How messages quote an option: its DDL spelling."""
    return f'"{PREFIX}{key}"'


# CQL's table option, in seconds (0: no default): a CQL-style table
# ("ttl_value_ttls") whose "ttl_expire_after" it sets.
CQL_DEFAULT_TTL = "default_time_to_live"


def is_ttl_name(defname: str) -> bool:
    """True for ``ttl`` itself, every ``ttl_*`` storage parameter name and CQL's default_time_to_live."""
    name = defname.lower()
    return name == "ttl" or name.startswith(PREFIX) or name == CQL_DEFAULT_TTL


def cql_default_ttl(value: str) -> dict[str, str]:
    """``default_time_to_live = N`` as the options it stands for."""
    text = value.strip()
    if not re.fullmatch(r"\d+", text) or int(text) > INT4_MAX:
        raise OptionError(f"value of \"{CQL_DEFAULT_TTL}\" must be a whole number of seconds (0: no default), "
                          f"got '{value}'", hint="e.g. default_time_to_live = 86400")
    return {"expire_after": f"{int(text)} seconds", "value_ttls": "true"}


def key_of(defname: str) -> str:
    """``ttl_expire_after`` -> ``expire_after``; refuses names that are not options."""
    name = defname.lower()
    key = name[len(PREFIX):]
    key = ALIASES.get(key, key)
    if key not in OPTIONS and key not in ORPHAN_OPTIONS and key not in TIER_OPTIONS:
        raise OptionError(
            f"unknown TTL option \"{name}\"",
            hint="accepted options: ttl, " + ", ".join(PREFIX + k for k in [*OPTIONS, *TIER_OPTIONS,
                                                                             *ORPHAN_OPTIONS]),
        )
    return key


def value_text(elem: ast.DefElem) -> str:
    """The value of ``name = value`` as text, the way PostgreSQL stores reloptions.

    A bare name (``WITH (ttl_pause)``) means true, as for real storage parameters.
    """
    arg = elem.arg
    if arg is None:
        return "true"
    if isinstance(arg, ast.String):
        return str(arg.sval)
    if isinstance(arg, ast.Integer):
        return str(arg.ival)
    if isinstance(arg, ast.Float):
        return str(arg.fval)
    if isinstance(arg, ast.Boolean):
        return "true" if arg.boolval else "false"
    if isinstance(arg, ast.TypeName):
        # reloption values may be unquoted type-like words, e.g. ttl_unit = seconds
        return ".".join(str(n.sval) for n in arg.names or ())
    raise OptionError(f"value of {label(str(elem.defname)[len(PREFIX):])} must be a literal")


def check(key: str, value: str) -> str:
    """Check one option value; returns it as ttl.set_options should receive it."""
    kind = OPTIONS.get(key) or TIER_OPTIONS.get(key) or ORPHAN_OPTIONS[key]
    checker = _CHECKS[kind]
    checker(key, value)
    return value


# Column TTL (``ALTER COLUMN c SET (...)``): the interval, and what it counts
# from: 'row' (the table's TTL base) or 'write' (the value's own write time);
# unset, the database picks 'row' when the table has a TTL column, else 'write'.
COLUMN_OPTIONS = ("expire_after", "relative_to")
RELATIVE_TO = ("row", "write")


def column_key_of(defname: str) -> str:
    name = defname.lower()
    key = name[len(PREFIX):]
    if key not in COLUMN_OPTIONS:
        if key in OPTIONS:
            raise OptionError(f"TTL option {label(key)} does not apply to a column",
                              hint='a column takes "ttl_expire_after" and "ttl_relative_to"')
        raise OptionError(f"unknown TTL option \"{name}\"",
                          hint="accepted for a column: ttl, " + ", ".join(PREFIX + k for k in COLUMN_OPTIONS))
    return key


def check_column_option(key: str, value: str) -> None:
    if key == "expire_after":
        check_interval(key, value, allow_zero=False)
    elif value.strip().lower() not in RELATIVE_TO:
        raise OptionError(f"value of {label(key)} must be row or write, got '{value}'")


# ---------------------------------------------------------------- intervals

# PostgreSQL's interval units (src/backend/utils/adt/datetime.c, deltatktbl),
# compared on their first 10 characters as PostgreSQL does (TOKMAXLEN).
_UNIT_SECONDS: dict[str, float] = {}
for _names, _secs in (
    (("microsecon", "us", "usec", "usecond", "useconds", "usecs"), 1e-6),
    (("millisecon", "ms", "msec", "msecond", "mseconds", "msecs"), 1e-3),
    (("s", "sec", "second", "seconds", "secs"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hour", "hours", "hr", "hrs"), 3600.0),
    (("d", "day", "days"), 86400.0),
    (("w", "week", "weeks"), 7 * 86400.0),
    (("mon", "mons", "month", "months"), 30 * 86400.0),
    (("y", "year", "years", "yr", "yrs"), 360 * 86400.0),
    (("dec", "decade", "decades", "decs"), 3600 * 86400.0),
    (("c", "cent", "centuries", "century"), 36000 * 86400.0),
    (("mil", "millennia", "millennium", "mils"), 360000 * 86400.0),
):
    for _n in _names:
        _UNIT_SECONDS[_n] = _secs

_ISO_DESIGNATORS = re.compile(
    r"P(?:(?P<y>[-+]?\d+(?:\.\d+)?)Y)?(?:(?P<mo>[-+]?\d+(?:\.\d+)?)M)?(?:(?P<w>[-+]?\d+(?:\.\d+)?)W)?"
    r"(?:(?P<d>[-+]?\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>[-+]?\d+(?:\.\d+)?)H)?(?:(?P<mi>[-+]?\d+(?:\.\d+)?)M)?(?:(?P<s>[-+]?\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)
# 'P1' (a year), 'P1-2': PostgreSQL reads ISO forms without designators by its own rules: it decides.
_ISO_BARE = re.compile(r"P[-+]?\d[-+\d.:]*")
_ISO_ALTERNATIVE = re.compile(r"P\d+-\d+-\d+(?:T\d+:\d+:\d+(?:\.\d+)?)?", re.IGNORECASE)
_TOKEN = re.compile(r"\s*(?:(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+))(?P<rest>[-:]\d[\d:.]*)?|(?P<word>[A-Za-z]+|@))")


def interval_seconds(text: str) -> float | None:
    """Approximate length of an interval literal in seconds (30-day months, as
    PostgreSQL compares intervals); None when this checker cannot tell (the
    database decides then); ValueError when the text is certainly not an interval.
    A test holds it to never refusing what PostgreSQL accepts."""
    s = text.strip()
    if not s:
        raise ValueError("empty")
    if s[0] in "pP":
        return _iso_seconds(s)
    total = 0.0
    pending: float | None = None
    pos = 0
    sign = 1.0
    uncertain = False
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None:
            rest = s[pos:].lstrip()
            if not rest:
                break
            if rest[0] in ":-+./,":
                # Stray punctuation: PostgreSQL's interval reader tolerates some ('0 :').
                uncertain = True
                pos = len(s) - len(rest) + 1
                continue
            raise ValueError(f"unexpected {rest[:10]!r}")
        pos = m.end()
        if m.group("num") is not None:
            if m.group("rest"):
                uncertain = True  # 'hh:mm:ss' or 'y-m' fields: the database reads them
                pending = None
                continue
            if pending is not None:
                uncertain = True  # two bare numbers ('1 -1 hour'): PostgreSQL reads them by context
            pending = float(m.group("num"))
            continue
        word = m.group("word").lower()
        if word == "@":
            continue
        if word == "ago":
            if s[pos:].strip() or sign < 0:
                uncertain = True  # 'ago' only counts as the last word: otherwise PostgreSQL decides
            sign = -sign
            continue
        unit = _UNIT_SECONDS.get(word[:10])
        if unit is None:
            raise ValueError(f"unknown unit {word!r}")
        if pending is None:
            uncertain = True  # PostgreSQL is lenient about order ('day 0'): it decides
            continue
        total += pending * unit
        pending = None
    if pending is not None:
        total += pending
    return None if uncertain else sign * total


def _iso_seconds(s: str) -> float | None:
    if _ISO_ALTERNATIVE.fullmatch(s) or _ISO_BARE.fullmatch(s):
        return None
    m = _ISO_DESIGNATORS.fullmatch(s)
    # PostgreSQL reads a 'T' with no time after it ('P1DT', 'PT': 0) as nothing more; 'P' alone it refuses.
    if m is None or s.upper() == "P":
        raise ValueError("not an ISO 8601 duration")
    scale = {"y": 360 * 86400, "mo": 30 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "mi": 60, "s": 1}
    return sum(float(v) * scale[k] for k, v in m.groupdict().items() if v is not None)


def check_interval(key: str, value: str, allow_zero: bool = True) -> None:
    """A table's expire_after may be zero (expire at the column's own time, YDB's
    PT0S; the database refuses it without a column); a column's may not."""
    hint = "e.g. '30 days', '12 hours' or ISO 8601 'P30D', 'PT1H'"
    try:
        seconds = interval_seconds(value)
    except ValueError:
        raise OptionError(f"value of {label(key)} must be an interval, got '{value}'", hint=hint) from None
    if seconds is not None and seconds < 0:
        raise OptionError(f"value of {label(key)} must not be negative, got '{value}'", hint=hint)
    if seconds == 0 and not allow_zero:
        raise OptionError(f"value of {label(key)} must be greater than zero, got '{value}'", hint=hint)


# ---------------------------------------------------------------- the rest

def _check_column(key: str, value: str) -> None:
    if not value.strip():
        raise OptionError(f"value of {label(key)} must be a column name")


def _check_schema(key: str, value: str) -> None:
    if not value.strip():
        raise OptionError(f"value of {label(key)} must be a schema name")


def _check_table(key: str, value: str) -> None:
    if not value.strip() or value.strip().startswith("("):
        raise OptionError(f"value of {label(key)} must name a table, e.g. 'metadata(hash)'")


def _check_columns(key: str, value: str) -> None:
    if not [c for c in value.split(",") if c.strip()]:
        raise OptionError(f"value of {label(key)} must name at least one column")


def check_expression(key: str, value: str) -> None:
    """One SQL expression: no ';', no second statement, no FROM/AS/... around it.

    Its type (timestamptz) and the columns it uses are the database's to check.
    """
    msg = f"value of {label(key)} must be a single valid SQL expression of type timestamptz"
    if not value.strip():
        raise OptionError(f"{msg}, got an empty string")
    try:
        tokens = pglast.parser.scan(value)
    except pglast.parser.ParseError as exc:
        raise OptionError(f"{msg}: {exc.args[0]}") from None
    if any(t.name == "ASCII_59" for t in tokens):
        raise OptionError(f"{msg} (no \";\")")
    # Parsed as the only item of a SELECT list: anything more than one bare
    # expression shows up as a second statement, a second target, an alias or a
    # clause. (Parsed only, never run.)
    try:
        stmts = pglast.parse_sql("SELECT " + value + "\n")
    except pglast.parser.ParseError as exc:
        raise OptionError(f"{msg}: {exc.args[0]}") from None
    if len(stmts) != 1:
        raise OptionError(msg)
    sel = stmts[0].stmt
    if (not isinstance(sel, ast.SelectStmt) or sel.targetList is None or len(sel.targetList) != 1
            or sel.targetList[0].name is not None
            or any(getattr(sel, f) for f in ("fromClause", "whereClause", "groupClause", "havingClause",
                                              "sortClause", "limitCount", "limitOffset", "windowClause",
                                              "distinctClause", "valuesLists", "intoClause", "larg",
                                              "withClause", "lockingClause"))):
        raise OptionError(msg)


def _check_unit(key: str, value: str) -> None:
    if value.strip().lower() not in UNITS:
        raise OptionError(f"value of {label(key)} must be {', '.join(UNITS[:-1])} or {UNITS[-1]}, got '{value}'")


def check_cron(key: str, value: str) -> None:
    hint = "use five fields (minute hour day-of-month month day-of-week) or " + ", ".join(CRON_ALIASES)
    expr = value.strip()
    if expr.lower() in CRON_ALIASES:
        return
    if len(expr.split()) != 5:
        raise OptionError(f"invalid cron expression for {label(key)}: '{value}' must have 5 fields", hint=hint)
    if not croniter.is_valid(expr):
        raise OptionError(f"invalid cron expression for {label(key)}: '{value}'", hint=hint)


# PostgreSQL's boolean input (boolin): any unambiguous prefix of true/false/yes/no, on/off, 1/0.
def parse_bool(value: str) -> bool | None:
    v = value.strip().lower()
    if not v:
        return None
    if "true".startswith(v) or "yes".startswith(v) or v == "on" or v == "1":
        return True
    if "false".startswith(v) or "no".startswith(v) or (len(v) >= 2 and "off".startswith(v)) or v == "0":
        return False
    return None


def _check_bool(key: str, value: str) -> None:
    if parse_bool(value) is None:
        raise OptionError(f"value of {label(key)} must be a boolean (true/false), got '{value}'")


def _as_int(key: str, value: str) -> int:
    v = value.strip()
    digits = v[1:] if v[:1] in "+-" else v
    if not digits.isascii() or not digits.isdigit():
        raise OptionError(f"value of {label(key)} must be an integer, got '{value}'")
    n = int(v)
    if n > INT4_MAX:
        raise OptionError(f"value of {label(key)} must be at most {INT4_MAX}, got {value}")
    return n


def _check_batch(key: str, value: str) -> None:
    if _as_int(key, value) < 1:
        raise OptionError(f"value of {label(key)} must be at least 1, got {value.strip()}")


def _check_rate(key: str, value: str) -> None:
    if _as_int(key, value) < 0:
        raise OptionError(f"value of {label(key)} must be at least 1 (or 0 for unlimited), got {value.strip()}")


def _check_shards(key: str, value: str) -> None:
    if not 0 <= _as_int(key, value) <= 1024:
        raise OptionError(f"value of {label(key)} must be between 0 (no queue) and 1024, got {value.strip()}")


_TIER = re.compile(r"^\s*(.+?)\s+(?:to\s+(\"[^\"]+\"|[A-Za-z_][A-Za-z0-9_-]*)|delete)\s*$", re.I)


def _check_tiers(key: str, value: str) -> None:
    """``<interval> TO <storage>, ..., [<interval> DELETE]`` (the database checks the rest:
    storages exist, intervals increase)."""
    if value.strip().startswith("["):
        return  # ttl.set_tiers's JSON, checked by the database
    parts = [p for p in value.split(",")]
    for i, part in enumerate(parts):
        m = _TIER.match(part)
        if m is None:
            raise OptionError(f"value of {label(key)}: '{part.strip()}' is neither '<interval> TO <storage>' "
                              "nor '<interval> DELETE'", hint="e.g. ttl_tiers = '30 days TO cold, 400 days DELETE'")
        check_interval(key, m.group(1))
        if m.group(2) is None and i != len(parts) - 1:
            raise OptionError(f"value of {label(key)}: DELETE must be the last tier")


def _check_partition_action(key: str, value: str) -> None:
    if value.strip().lower() not in PARTITION_ACTIONS:
        raise OptionError(f"value of {label(key)} must be drop or detach, got '{value}'")


_CHECKS = {
    Kind.INTERVAL: check_interval,
    Kind.COLUMN: _check_column,
    Kind.EXPRESSION: check_expression,
    Kind.UNIT: _check_unit,
    Kind.CRON: check_cron,
    Kind.BOOL: _check_bool,
    Kind.BATCH: _check_batch,
    Kind.RATE: _check_rate,
    Kind.SHARDS: _check_shards,
    Kind.TIERS: _check_tiers,
    Kind.PARTITION_ACTION: _check_partition_action,
    Kind.SCHEMA: _check_schema,
    Kind.TABLE: _check_table,
    Kind.COLUMNS: _check_columns,
}


def check_ttl_switch(value: str) -> None:
    """``ttl = value``, CockroachDB's switch: 'on' is accepted (the other options
    enable TTL); 'off' is refused because RESET (ttl) is what removes TTL."""
    b = parse_bool(value)
    if b is True:
        return
    hint = "remove TTL with ALTER TABLE ... RESET (ttl)"
    if b is False:
        raise OptionError(f"\"ttl\" cannot be set to '{value}'", hint=hint)
    raise OptionError(f"value of \"ttl\" must be on, got '{value}'", hint=hint)
