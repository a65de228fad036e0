"""The SQL-side cron check (sql/05_cron.sql) against croniter, the worker's scheduler.

Hard rule: ``ttl.cron_error`` never accepts an expression croniter cannot
schedule; inside the supported language (see sql/05_cron.sql) the two agree
exactly; outside it SQL refuses. ``ttl.cron_min_interval`` is checked against
a brute force over croniter's own firings.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import catalog_state

FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
LO = (0, 0, 1, 1, 0)
HI = (59, 23, 31, 12, 7)  # the largest value one may write (day-of-week 7 = Sunday)
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
ALIASES = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
# ASCII whitespace croniter splits on; U+00A0 and U+3000 it does not.
SEPARATORS = (" ", " ", " ", "  ", "\t", "\n", "\r", "\x0b", "\x0c", " \t ")

HYPO = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


def croniter_ok(expr: str) -> bool:
    """croniter accepts the expression and can actually schedule it (forwards and backwards)."""
    if not croniter.is_valid(expr):
        return False
    try:
        croniter(expr, datetime(2024, 5, 17, 13, 7)).get_next(datetime)
        croniter(expr, datetime(2024, 5, 17, 13, 7)).get_prev(datetime)
    except Exception:  # croniter raises several kinds for "never fires"
        return False
    return True


def sql_errors(conn: psycopg.Connection[Any], exprs: list[str]) -> list[str | None]:
    """ttl.cron_error for many expressions in one round trip."""
    rows = conn.execute(
        "SELECT ttl.cron_error(e) FROM unnest(%s::text[]) WITH ORDINALITY AS u(e, n) ORDER BY n", (exprs,)
    ).fetchall()
    return [r[0] for r in rows]


def min_intervals(conn: psycopg.Connection[Any], exprs: list[str]) -> list[timedelta | None]:
    rows = conn.execute(
        "SELECT ttl.cron_min_interval(e) FROM unnest(%s::text[]) WITH ORDINALITY AS u(e, n) ORDER BY n", (exprs,)
    ).fetchall()
    return [r[0] for r in rows]


# -- generating expressions -------------------------------------------------------
# Each generated piece carries ``outside``: it uses a construct our language
# leaves out although croniter may accept it. Everything else (including the
# broken shapes both must refuse) is "inside", where SQL and croniter must agree.


@dataclass(frozen=True)
class Piece:
    text: str
    outside: bool = False


def _value_of(token: str, idx: int) -> int | None:
    """The number a token denotes in field idx, as SQL and croniter read it (None: not a value)."""
    t = token.lower()
    if t.isdigit():
        return int(t)
    if idx == 3 and t in MONTHS:
        return MONTHS.index(t) + 1
    if idx == 4 and t in DAYS:
        return DAYS.index(t)
    return None


def _mixed_case(draw: st.DrawFn, word: str) -> str:
    mask = draw(st.integers(0, 15))  # one draw: generation speed is what bounds this test's runtime
    return "".join(c.upper() if mask >> (i % 4) & 1 else c for i, c in enumerate(word))


@st.composite
def value_token(draw: st.DrawFn, idx: int) -> str:
    kind = draw(st.sampled_from(["num", "num", "num", "edge", "zeros", "huge", "name", "othername", "letters"]))
    if kind == "num":
        return str(draw(st.integers(LO[idx], HI[idx])))
    if kind == "edge":  # just outside or on the bounds
        return str(draw(st.sampled_from([max(LO[idx] - 1, 0), LO[idx], HI[idx], HI[idx] + 1, 60, 24, 32, 13, 8])))
    if kind == "zeros":
        return "0" * draw(st.integers(1, 3)) + str(draw(st.integers(LO[idx], HI[idx] + 2)))
    if kind == "huge":
        return str(draw(st.integers(100, 10**25)))
    if kind == "name":
        names = MONTHS if idx == 3 else DAYS if idx == 4 else MONTHS + DAYS
        return _mixed_case(draw, draw(st.sampled_from(names)))
    if kind == "othername":  # a name of the other field, or a near miss
        return _mixed_case(draw, draw(st.sampled_from([*DAYS, *MONTHS, "janu", "mo", "sunday", "x"])))
    return draw(st.text(alphabet="abcxyzq", min_size=1, max_size=4))


@st.composite
def step_token(draw: st.DrawFn) -> str:
    return draw(st.one_of(st.integers(0, 70).map(str), st.integers(1, 10**22).map(str),
                          st.sampled_from(["00", "05", "015", "0"])))


SPECIAL: tuple[tuple[Piece, ...], ...] = (
    (Piece("59"), Piece("0-59"), Piece("*/60"), Piece("59/15")),
    (Piece("23"), Piece("0-23/23"), Piece("22-2", True), Piece("0-23")),
    (Piece("29"), Piece("30"), Piece("31"), Piece("30-31"), Piece("29,31"), Piece("1-31")),
    (Piece("2"), Piece("feb"), Piece("Apr"), Piece("4,6"), Piece("9-11/2"), Piece("2-4/2"), Piece("dec-jan", True)),
    (Piece("7"), Piece("07"), Piece("0-7"), Piece("5-7"), Piece("sun-7"), Piece("1-7/2"), Piece("2-7/2"),
     Piece("0-7/7"), Piece("sun-sat"), Piece("7/2", True), Piece("7/1", True), Piece("7-7", True),
     Piece("sat-sun", True), Piece("6-0", True), Piece("0-0", True)),
)


@st.composite
def item(draw: st.DrawFn, idx: int) -> Piece:
    shape = draw(st.sampled_from(
        ["value", "value", "range", "range", "range_step", "star_step", "start_step", "extension", "broken",
         "special"]))
    if shape == "special":  # corners: days some months lack, day-of-week 7
        return draw(st.sampled_from(SPECIAL[idx]))
    if shape == "value":
        return Piece(draw(value_token(idx)))
    if shape in ("range", "range_step"):
        a, b = draw(value_token(idx)), draw(value_token(idx))
        va, vb = _value_of(a, idx), _value_of(b, idx)
        text = f"{a}-{b}" + (f"/{draw(step_token())}" if shape == "range_step" else "")
        # reversed and equal ranges croniter accepts (wrap-around / whole field); we refuse them
        return Piece(text, outside=va is not None and vb is not None and va >= vb)
    if shape == "star_step":
        return Piece(f"*/{draw(step_token())}")
    if shape == "start_step":
        a = draw(value_token(idx))
        return Piece(f"{a}/{draw(step_token())}", outside=idx == 4 and _value_of(a, idx) == 7)
    if shape == "extension":  # croniter extensions we leave out (croniter accepts some of them)
        ext = draw(st.sampled_from(
            ["l", "L", "15w", "W3", "1#2", "mon#3", "l5", "?", "h", "H", "h/5", "H(0-5)", "r", "R(1-9)/2", "*"]))
        return Piece(ext, outside=True)
    broken = draw(st.sampled_from(
        ["", "-3", "*-5", "1-2-3", "+5", "5/", "/5", "*/5/2", "**", "1-", "-", "a-b", "5//2", "5-/2", "*/*",
         "1.5", "٣", "5\u00a0", "5\u3000"]))
    return Piece(broken)


@st.composite
def tame_item(draw: st.DrawFn, idx: int) -> Piece:
    """Mostly valid items, so that the rest of an expression does not hide a wrong answer."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(SPECIAL[idx]))
    return Piece(draw(valid_item(idx, 1)))


@st.composite
def field(draw: st.DrawFn, idx: int, wild: bool) -> Piece:
    if draw(st.integers(0, 3)) == 0:
        return Piece("*")
    items = draw(st.lists(item(idx) if wild else tame_item(idx), min_size=1, max_size=3))
    text = ",".join(p.text for p in items)
    # "*" is fine as a whole field but we refuse it inside a list
    outside = any(p.outside for p in items) and not (len(items) == 1 and items[0].text == "*")
    return Piece(text, outside)


@st.composite
def expression(draw: st.DrawFn) -> Piece:
    kind = draw(st.sampled_from(["fields"] * 6 + ["days", "days", "alias", "count"]))
    if kind == "days":  # day-of-month against short months: croniter accepts, then never finds a run
        dom = draw(st.sampled_from(["29", "30", "31", "30,31", "29-31", "31/7", "30-31/1", "15", "*/15"]))
        month = draw(st.sampled_from(["2", "feb", "4", "Apr,jun", "2,4,6,9,11", "9-11/2", "2-4/2", "*", "1"]))
        dow = draw(st.sampled_from(["*", "*", "*", "1", "0-6", "*/1", "sun-sat"]))
        return Piece(f"0 0 {dom} {month} {dow}")
    if kind == "alias":
        name = _mixed_case(draw, draw(st.sampled_from([*ALIASES, "@every", "@reboot", "@", "@hour"])))
        pad = draw(st.sampled_from(["", "", "", " ", "\t", "\n"]))
        return Piece(draw(st.sampled_from([name, pad + name, name + pad])))
    wild = draw(st.sets(st.integers(0, 4), max_size=2))
    fields = [draw(field(i, i in wild)) for i in range(5)]
    if kind == "count":  # 3, 4, 8 fields: both refuse; 6, 7 (seconds, year): croniter accepts, we refuse
        n = draw(st.sampled_from([1, 3, 4, 6, 7, 8]))
        extra = [Piece(draw(st.sampled_from(["0", "*", "*/10", "2025"]))) for _ in range(max(n - 5, 0))]
        fields = (fields + extra)[:n]
        outside = n in (6, 7) or any(p.outside for p in fields)
    else:
        outside = any(p.outside for p in fields)
    seps = [draw(st.sampled_from(SEPARATORS)) for _ in range(len(fields) + 1)]
    lead = seps[0] if draw(st.booleans()) else ""
    trail = seps[-1] if draw(st.booleans()) else ""
    return Piece(lead + "".join(s + p.text for s, p in zip(["", *seps[1:-1]], fields, strict=True)) + trail,
                 outside)


@pytest.mark.slow
@given(exprs=st.lists(expression(), min_size=6, max_size=6))
@HYPO
def test_sql_agrees_with_croniter(db: psycopg.Connection[Any], exprs: list[Piece]) -> None:
    errors = sql_errors(db, [p.text for p in exprs])
    for piece, err in zip(exprs, errors, strict=True):
        ok = croniter_ok(piece.text)
        if err is None:
            assert ok, f"SQL accepts {piece.text!r}, croniter cannot schedule it"
            assert not piece.outside, f"SQL accepts {piece.text!r}, outside the supported language"
        elif not piece.outside:
            assert not ok, f"SQL refuses {piece.text!r} ({err}), croniter accepts it"


# -- valid expressions for the interval property ------------------------------------


@st.composite
def valid_item(draw: st.DrawFn, idx: int, min_step: int) -> str:
    """One item our language accepts; min_step (and short ranges) keep the runs sparse."""
    lo, top = LO[idx], (59, 23, 31, 12, 6)[idx]
    shape = draw(st.sampled_from(["value", "value", "range", "range_step", "star_step", "start_step"]))
    if shape == "value":
        v = draw(st.integers(lo, HI[idx]))
        if idx == 3 and draw(st.booleans()):
            return MONTHS[v - 1]
        if idx == 4 and v < 7 and draw(st.booleans()):
            return DAYS[v]
        return str(v)
    if shape == "star_step":
        return f"*/{draw(st.integers(min_step, top + 3))}"
    if shape == "start_step":
        return f"{draw(st.integers(lo, top))}/{draw(st.integers(min_step, top + 3))}"
    a = draw(st.integers(lo, HI[idx] - 1))
    b = draw(st.integers(a + 1, min(HI[idx], a + 3)))
    return f"{a}-{b}" + (f"/{draw(st.integers(1, 4))}" if shape == "range_step" else "")


# smallest step per field: few runs per day and (mostly) few run days, so that
# croniter's firings from 2000 to 2032 stay countable
SPARSE_STEP = (20, 8, 7, 1, 3)


@st.composite
def valid_expression(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 15)) == 15:
        return draw(st.sampled_from(ALIASES))
    parts = []
    for idx in range(5):
        if idx >= 2 and draw(st.integers(0, 9)) < 4:
            parts.append("*")
        else:
            n = draw(st.integers(1, 2))
            parts.append(",".join(draw(valid_item(idx, SPARSE_STEP[idx])) for _ in range(n)))
    return " ".join(parts)


WINDOW_END = datetime(2032, 1, 1)
MAX_FIRINGS = 3000


def brute_min_gap(expr: str) -> tuple[timedelta, bool]:
    """Smallest gap between croniter's consecutive firings from 2000 on; True when it reached 2032."""
    it = croniter(expr, datetime(1999, 12, 31, 23, 59))
    prev: datetime = it.get_next(datetime)
    best: timedelta | None = None
    for _ in range(MAX_FIRINGS):
        nxt: datetime = it.get_next(datetime)
        gap = nxt - prev
        best = gap if best is None or gap < best else best
        if nxt >= WINDOW_END:
            assert best is not None
            return best, True
        prev = nxt
    assert best is not None
    return best, False


@pytest.mark.slow
@given(exprs=st.lists(valid_expression(), min_size=4, max_size=4))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
def test_min_interval_matches_brute_force(db: psycopg.Connection[Any], exprs: list[str]) -> None:
    errors = sql_errors(db, exprs)
    intervals = min_intervals(db, exprs)
    for expr, err, got in zip(exprs, errors, intervals, strict=True):
        if err is not None:  # a day-of-month the chosen months lack
            assert got is None and not croniter_ok(expr), (expr, err)
            continue
        assert got is not None, expr
        observed, complete = brute_min_gap(expr)
        # never larger than a gap croniter really produces; exact once the window covers 2000-2031
        assert got <= observed, f"{expr!r}: SQL says {got}, croniter fires {observed} apart"
        if complete:
            assert got == observed, f"{expr!r}: SQL says {got}, croniter's shortest gap is {observed}"


# -- examples --------------------------------------------------------------------------


INTERVAL_EXAMPLES = [
    ("* * * * *", timedelta(minutes=1)),
    ("*/5 * * * *", timedelta(minutes=5)),
    ("0,50 * * * *", timedelta(minutes=10)),
    ("10,20 * * * *", timedelta(minutes=10)),
    ("7 * * * *", timedelta(hours=1)),
    ("*/60 * * * *", timedelta(hours=1)),
    ("59/15 * * * *", timedelta(hours=1)),
    ("0 */2 * * *", timedelta(hours=2)),
    ("0 0 * * *", timedelta(days=1)),
    ("59 23 * * *", timedelta(days=1)),
    ("30 0,23 * * *", timedelta(hours=1)),     # 23:30 -> 00:30 next day
    ("0 1,22 * * *", timedelta(hours=3)),      # 22:00 -> 01:00 next day
    ("0 0 * * 1", timedelta(days=7)),
    ("0 0 * * mon-fri", timedelta(days=1)),
    ("0 0 * * 1,5", timedelta(days=3)),        # Fri -> Mon
    ("0 0 * * 0,6", timedelta(days=1)),        # Sat -> Sun
    ("0 0 * * 0,7", timedelta(days=7)),        # 0 and 7 are both Sunday
    ("0 0 31 * *", timedelta(days=31)),        # 31 Jul -> 31 Aug
    ("0 0 1,31 * *", timedelta(days=1)),       # 31st -> 1st
    ("0 0 29 2 *", timedelta(days=4 * 365 + 1)),
    ("0 0 1 1 *", timedelta(days=365)),
    ("0 0 13 * 5", timedelta(days=1)),         # Fridays OR the 13th: Thu 13th -> Fri 14th
    ("0 0 1-31 * 1", timedelta(days=1)),       # croniter: both restricted, so any day
    ("0 0 */2 * 0-6", timedelta(days=1)),      # day-of-week counts as "*": odd days, 31st -> 1st
    ("@hourly", timedelta(hours=1)),
    ("@daily", timedelta(days=1)),
    ("@midnight", timedelta(days=1)),
    ("@weekly", timedelta(days=7)),
    ("@monthly", timedelta(days=28)),
    ("@yearly", timedelta(days=365)),
    ("@annually", timedelta(days=365)),
]


@pytest.mark.slow
def test_min_interval_examples(db: psycopg.Connection[Any]) -> None:
    exprs = [e for e, _ in INTERVAL_EXAMPLES]
    got = dict(zip(exprs, min_intervals(db, exprs), strict=True))
    wrong = {e: (got[e], want) for e, want in INTERVAL_EXAMPLES if got[e] != want}
    assert not wrong, wrong
    # the expectations themselves are what croniter does
    observed = {e: brute_min_gap(e)[0] for e in exprs}
    assert observed == dict(INTERVAL_EXAMPLES)


ERROR_EXAMPLES = [
    ("61 * * * *", "minute value 61 out of range 0-59"),
    ("0 24 * * *", "hour value 24 out of range 0-23"),
    ("0 0 0 * *", "day-of-month value 0 out of range 1-31"),
    ("0 0 * 13 *", "month value 13 out of range 1-12"),
    ("0 0 * * 8", "day-of-week value 8 out of range 0-7"),
    ("* * * *", "must have 5 fields (minute hour day-of-month month day-of-week), got 4"),
    ("0 * * * * *", "got 6 (seconds and year fields are not supported)"),
    ("", "must not be empty"),
    ("  ", "must not be empty"),
    ("5-1 * * * *", 'minute range "5-1" is reversed'),
    ("5-5 * * * *", 'minute range "5-5" has equal bounds'),
    ("0 0 * * sat-sun", 'day-of-week range "sat-sun" is reversed'),
    ("*/0 * * * *", 'minute item "*/0" has step 0'),
    ("1,,2 * * * *", 'minute field "1,,2" has an empty list item'),
    ("*,5 * * * *", '"*" must stand alone'),
    ("0 0 L * *", 'day-of-month item "L" uses L'),
    ("0 0 15W * *", "uses L or W"),
    ("0 0 * * 1#2", 'uses "#" (nth weekday)'),
    ("0 0 ? * *", 'uses "?"'),
    ("H * * * *", "H/R (hashed or random values)"),
    ("0 0 * * 7/2", '7 cannot start a step, write "0/2"'),
    ("0 0 * foo *", 'unknown month name "foo"'),
    ("0 0 * * Mun", 'unknown day-of-week name "Mun"'),
    ("0 0 * * jan", 'unknown day-of-week name "jan"'),
    ("x * * * *", 'minute value "x" is not a number'),
    ("-1 * * * *", 'minute item "-1" is negative'),
    ("0 0 30 2 *", 'day-of-month "30" never occurs in month "2"'),
    ("0 0 31 apr,jun *", "the schedule would never run"),
    ("@every", 'unknown shortcut "@every"'),
    (" @daily", '"@daily" must be written without surrounding whitespace'),
    ("0 0 * * 1\u00a0", "unsupported character"),
]


def test_error_messages(db: psycopg.Connection[Any]) -> None:
    exprs = [e for e, _ in ERROR_EXAMPLES]
    errors = dict(zip(exprs, sql_errors(db, exprs), strict=True))
    wrong = {e: errors[e] for e, message in ERROR_EXAMPLES if message not in (errors[e] or "")}
    assert not wrong, wrong


ACCEPTED = [
    "0 0 * * *", "*/15 * * * *", "0,30 * * * *", "05 4 * * *", "0 0 * * 7", "0 0 * * 5-7", "0 0 * * 0-7",
    "0 0 * * MON-FRI", "0 0 * Jan-Mar *", "0 0 * jan/3 *", "10/5 * * * *", "59/15 * * * *",
    "0 0 * * mon-fri/2", "*/99999999999999999999 * * * *", "0\t0 * * *", " 0 0 * * * ", "@HOURLY", "@Daily",
    "0 0 29 2 *", "0 0 31 2 1", "0 0 1-31/2 * 0-6",
]


def test_accepted(db: psycopg.Connection[Any]) -> None:
    assert sql_errors(db, ACCEPTED) == [None] * len(ACCEPTED)
    assert [e for e in ACCEPTED if not croniter_ok(e)] == []


def test_null_is_refused(db: psycopg.Connection[Any]) -> None:
    assert db.execute("SELECT ttl.cron_error(NULL), ttl.cron_min_interval(NULL)").fetchone() == (
        "must not be empty", None)


# -- the minimum interval at the API ------------------------------------------------------


def test_min_job_interval_refuses_frequent_schedule(db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE TABLE events (id int, created_at timestamptz)")
    db.commit()
    assert db.execute("SELECT value FROM ttl.settings WHERE name = 'min_job_interval'").fetchone() == ("15 minutes",)
    before = catalog_state(db)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as exc:
        db.execute("SELECT ttl.enable('events', '1 day', 'created_at', job_cron => '*/5 * * * *')")
    db.rollback()
    assert '"ttl_job_cron"' in str(exc.value)
    assert "00:05:00" in str(exc.value) and "15 minutes" in str(exc.value)
    assert catalog_state(db) == before

    # exactly the minimum is fine, and so is a faster one with the override
    db.execute("SELECT ttl.enable('events', '1 day', 'created_at', job_cron => '*/15 * * * *')")
    db.execute("SELECT ttl.disable('events')")
    db.execute("SELECT ttl.enable('events', '1 day', 'created_at', job_cron => '*/5 * * * *', "
               "job_cron_override => true)")
    row = db.execute("SELECT job_cron, job_cron_override FROM ttl.policy").fetchone()
    assert row == ("*/5 * * * *", True)
    db.commit()

    # dropping the override while keeping the schedule is refused too
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="ttl_job_cron"):
        db.execute("SELECT ttl.set_option('events', 'job_cron_override', 'false')")
    db.rollback()
    assert db.execute("SELECT job_cron_override FROM ttl.policy").fetchone() == (True,)


def test_min_job_interval_follows_the_setting(db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE TABLE events (id int, created_at timestamptz)")
    db.execute("UPDATE ttl.settings SET value = '2 hours' WHERE name = 'min_job_interval'")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="ttl_job_cron"):
        db.execute("SELECT ttl.enable('events', '1 day', 'created_at', job_cron => '@hourly')")
    db.rollback()
    db.execute("CREATE TABLE events (id int, created_at timestamptz)")
    db.execute("UPDATE ttl.settings SET value = '2 hours' WHERE name = 'min_job_interval'")
    db.execute("SELECT ttl.enable('events', '1 day', 'created_at', job_cron => '0 */2 * * *')")
    assert db.execute("SELECT job_cron FROM ttl.policy").fetchone() == ("0 */2 * * *",)
