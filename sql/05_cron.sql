-- Cron expressions, checked in the database so every entry point agrees with
-- the worker's scheduler (croniter).
--
-- Supported language (a strict subset of what croniter accepts; everything
-- croniter accepts beyond it is refused here with a reason):
--   * exactly 5 fields separated by ASCII whitespace (space, tab, newline,
--     CR, FF, VT): minute 0-59, hour 0-23, day-of-month 1-31, month 1-12,
--     day-of-week 0-7 (0 and 7 are Sunday);
--   * each field is "*" alone, or a comma list of items:
--       v        a single value
--       a-b      a range with a < b (7 may end a day-of-week range)
--       a-b/n    a range with a step n >= 1
--       */n      the whole field with a step
--       a/n      a, a+n, ... up to the field maximum (6 for day-of-week)
--     values are decimal (leading zeros allowed) or, case-insensitively,
--     jan-dec in the month field and sun-sat in the day-of-week field;
--   * or one of @hourly @daily @midnight @weekly @monthly @yearly @annually
--     (any case, nothing around it: croniter refuses " @daily");
--   * the schedule must fire at least once: a day-of-month that no selected
--     month has ("0 0 31 2 *") is refused (croniter accepts it, then fails to
--     find a next run).
-- Refused although croniter accepts them: reversed ranges ("5-1", croniter
-- wraps around), equal ranges ("5-5", croniter reads them as the whole field),
-- "*" inside a list, "7/n" in day-of-week, seconds and year fields, L, W, #,
-- ?, H/R hashing.
-- Day matching follows croniter: when both day-of-month and day-of-week are
-- restricted a day matches either of them (the classic cron OR); a field
-- counts as unrestricted when it is "*" or, as croniter decides, when its
-- values cover the whole field and the other day field's text contains "*".

-- One value of a field: a decimal number (capped so huge numbers cannot
-- overflow and still count as out of range) or a name; NULL when it is neither.
CREATE OR REPLACE FUNCTION ttl._cron_value(token text, idx int) RETURNS int
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    pos int;
BEGIN
    IF token ~ '^[0-9]+$' THEN
        token := ltrim(token, '0');
        RETURN CASE WHEN token = '' THEN 0 WHEN length(token) > 6 THEN 999999 ELSE token::int END;
    END IF;
    IF idx = 4 THEN
        pos := array_position(ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'], token);
        RETURN pos;
    ELSIF idx = 5 THEN
        pos := array_position(ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], token);
        RETURN pos - 1;
    END IF;
    RETURN NULL;
END
$fn$;

-- One field (idx 1 minute .. 5 day-of-week) expanded to its sorted set of
-- values (day-of-week 7 folded into 0), or the reason it is refused.
CREATE OR REPLACE FUNCTION ttl._cron_field(raw text, idx int, OUT vals int[], OUT err text)
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    fname CONSTANT text := (ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'])[idx];
    lo CONSTANT int := (ARRAY[0, 0, 1, 1, 0])[idx];
    hi CONSTANT int := (ARRAY[59, 23, 31, 12, 7])[idx];   -- largest value one may write
    top CONSTANT int := (ARRAY[59, 23, 31, 12, 6])[idx];  -- where "*" and "a/n" end
    field CONSTANT text := translate(raw, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
    raw_items CONSTANT text[] := string_to_array(raw, ',');
    i int := 0;
    item text;
    shown text;  -- the item as written, for messages
    m text[];
    r text[];  -- the same groups as written
    a int;
    b int;
    step int;
    res int[] := '{}';
BEGIN
    IF field = '*' THEN
        vals := ARRAY(SELECT generate_series(lo, top));
        RETURN;
    END IF;
    FOREACH item IN ARRAY string_to_array(field, ',') LOOP
        i := i + 1;
        shown := raw_items[i];
        IF item = '' THEN
            err := format('%s field "%s" has an empty list item', fname, raw);
            RETURN;
        END IF;
        IF item = '*' THEN
            err := format('%s field "%s": "*" must stand alone, not in a list', fname, raw);
            RETURN;
        END IF;
        m := regexp_match(item, '^(\*|[0-9]+|[a-z]+)(?:-([0-9]+|[a-z]+))?(?:/([0-9]+))?$');
        IF m IS NULL OR (m[1] = '*' AND (m[2] IS NOT NULL OR m[3] IS NULL)) THEN
            err := format('%s item "%s" %s', fname, shown, CASE
                WHEN item ~ '[?]' THEN 'uses "?", which is not supported (use *)'
                WHEN item ~ '#' THEN 'uses "#" (nth weekday), which is not supported'
                WHEN item ~ '^-' THEN 'is negative'
                WHEN item ~ '^[hr]([(/]|$)' THEN 'uses H/R (hashed or random values), which is not supported'
                WHEN idx IN (3, 5) AND item ~ '[lw]' THEN 'uses L or W, which is not supported'
                WHEN item ~ '/$' THEN 'has an empty step'
                WHEN item ~ '/.*/' THEN 'has more than one step'
                ELSE 'is not a value, a-b range, */n or a/n step'
            END);
            RETURN;
        END IF;
        r := regexp_match(shown, '^(\*|[0-9]+|[a-z]+)(?:-([0-9]+|[a-z]+))?(?:/([0-9]+))?$', 'i');
        -- bounds of this item
        IF m[1] = '*' THEN
            a := lo;
            b := top;
        ELSE
            FOR k IN 1..2 LOOP
                CONTINUE WHEN m[k] IS NULL;
                a := ttl._cron_value(m[k], idx);
                IF a IS NULL THEN
                    err := CASE
                        WHEN idx = 4 THEN format('unknown month name "%s" (use jan-dec or 1-12)', r[k])
                        WHEN idx = 5 THEN format('unknown day-of-week name "%s" (use sun-sat or 0-7)', r[k])
                        WHEN idx = 3 AND m[k] = 'l' THEN format('day-of-month item "%s" uses L, which is not supported', shown)
                        WHEN m[k] ~ '^[hr]$' THEN format('%s item "%s" uses H/R (hashed or random values), which is not supported', fname, shown)
                        ELSE format('%s value "%s" is not a number', fname, r[k])
                    END;
                    RETURN;
                END IF;
                IF a < lo OR a > hi THEN
                    err := format('%s value %s out of range %s-%s', fname, r[k], lo, hi);
                    RETURN;
                END IF;
            END LOOP;
            a := ttl._cron_value(m[1], idx);
            IF m[2] IS NOT NULL THEN
                b := ttl._cron_value(m[2], idx);
                IF a > b THEN
                    err := format('%s range "%s" is reversed (croniter would wrap around); write %s', fname, shown,
                                  CASE WHEN idx = 5 AND b = 0 THEN format('"%s-7"', r[1])
                                       ELSE format('two ranges, e.g. "%s-%s,%s-%s"', r[1], top, lo, r[2]) END);
                    RETURN;
                ELSIF a = b THEN
                    err := format('%s range "%s" has equal bounds (croniter reads it as the whole field); write "%s"',
                                  fname, shown, r[1]);
                    RETURN;
                END IF;
            ELSIF m[3] IS NOT NULL THEN
                IF a > top THEN
                    err := format('%s item "%s": 7 cannot start a step, write "0/%s"', fname, shown, r[3]);
                    RETURN;
                END IF;
                b := top;
            ELSE
                b := a;
            END IF;
        END IF;
        step := 1;
        IF m[3] IS NOT NULL THEN
            step := ttl._cron_value(m[3], 0);
            IF step = 0 THEN
                err := format('%s item "%s" has step 0, the step must be at least 1', fname, shown);
                RETURN;
            END IF;
            step := least(step, 100);  -- any step wider than the field gives just the start
        END IF;
        res := res || ARRAY(SELECT generate_series(a, b, step));
    END LOOP;
    vals := ARRAY(SELECT DISTINCT CASE WHEN idx = 5 AND v = 7 THEN 0 ELSE v END AS d
                  FROM unnest(res) AS v ORDER BY d);
END
$fn$;

-- The whole expression: the reason it is refused (err), or its expansion.
CREATE OR REPLACE FUNCTION ttl._cron_parse(expr text,
    OUT err text, OUT minutes int[], OUT hours int[], OUT doms int[], OUT months int[], OUT dows int[],
    OUT dom_any boolean, OUT dow_any boolean)
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    w text;  -- whitespace normalised, as written
    e text;  -- lower case
    bad text;
    fields text[];
    f record;
    i int;
BEGIN
    IF expr IS NULL OR expr = '' THEN
        err := 'must not be empty';
        RETURN;
    END IF;
    -- croniter splits on ASCII whitespace only and lower-cases everything.
    w := translate(expr, chr(9) || chr(10) || chr(11) || chr(12) || chr(13), '     ');
    bad := substring(w FROM '[^ -~]');
    IF bad IS NOT NULL THEN
        err := format('contains the unsupported character %s (U+%s)', quote_literal(bad), lpad(to_hex(ascii(bad)), 4, '0'));
        RETURN;
    END IF;
    IF btrim(w) = '' THEN
        err := 'must not be empty';
        RETURN;
    END IF;
    e := translate(w, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
    IF left(btrim(e), 1) = '@' THEN
        IF btrim(e) NOT IN ('@hourly', '@daily', '@midnight', '@weekly', '@monthly', '@yearly', '@annually') THEN
            err := format('unknown shortcut "%s" (use @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually)', btrim(expr));
            RETURN;
        ELSIF e <> btrim(e) THEN
            err := format('"%s" must be written without surrounding whitespace', btrim(expr));
            RETURN;
        END IF;
        w := CASE e
            WHEN '@hourly' THEN '0 * * * *'
            WHEN '@daily' THEN '0 0 * * *'
            WHEN '@midnight' THEN '0 0 * * *'
            WHEN '@weekly' THEN '0 0 * * 0'
            WHEN '@monthly' THEN '0 0 1 * *'
            ELSE '0 0 1 1 *'
        END;
    END IF;
    fields := regexp_split_to_array(btrim(w), ' +');
    IF cardinality(fields) <> 5 THEN
        err := format('must have 5 fields (minute hour day-of-month month day-of-week), got %s%s', cardinality(fields),
                      CASE WHEN cardinality(fields) IN (6, 7) THEN ' (seconds and year fields are not supported)' ELSE '' END);
        RETURN;
    END IF;
    FOR i IN 1..5 LOOP
        f := ttl._cron_field(fields[i], i);
        IF f.err IS NOT NULL THEN
            err := f.err;
            RETURN;
        END IF;
        CASE i
            WHEN 1 THEN minutes := f.vals;
            WHEN 2 THEN hours := f.vals;
            WHEN 3 THEN doms := f.vals;
            WHEN 4 THEN months := f.vals;
            ELSE dows := f.vals;
        END CASE;
    END LOOP;
    -- croniter's notion of an unrestricted day field (see the header).
    dom_any := fields[3] = '*' OR (cardinality(doms) = 31 AND strpos(fields[5], '*') > 0);
    dow_any := fields[5] = '*' OR (cardinality(dows) = 7 AND strpos(fields[3], '*') > 0);
    -- Only day-of-month alone can select no day at all: every month has every weekday.
    IF NOT dom_any AND dow_any
       AND NOT EXISTS (SELECT FROM unnest(months) AS mo
                       WHERE doms[1] <= (ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[mo]) THEN
        err := format('day-of-month "%s" never occurs in month "%s", the schedule would never run', fields[3], fields[4]);
        RETURN;
    END IF;
END
$fn$;

-- NULL when the expression is valid, else a short reason.
CREATE OR REPLACE FUNCTION ttl.cron_error(expr text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN (ttl._cron_parse(expr)).err;
END
$fn$;

-- Shortest time between two consecutive runs of a valid expression (NULL when
-- invalid), in wall-clock time (a DST shift is not taken into account). Exact:
--   within a day the runs are the sorted minute-of-day set T, so the shortest
--   gap is the smallest step of T, or across days
--   (smallest gap between two consecutive run days) - (last of T - first of T).
-- The smallest day gap is 1 when no day field restricts, the smallest cyclic
-- weekday gap when only day-of-week restricts (every month holds every
-- weekday four times), and otherwise counted over 2000-2031: that holds every
-- calendar year kind (28-year weekday cycle plus the years after), and the
-- century years that skip 29 February only make gaps longer.
CREATE OR REPLACE FUNCTION ttl.cron_min_interval(expr text) RETURNS interval
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p record;
    t int[];
    in_day int;
    day_gap int;
    best int;
BEGIN
    p := ttl._cron_parse(expr);
    IF p.err IS NOT NULL THEN
        RETURN NULL;
    END IF;
    t := ARRAY(SELECT h * 60 + mi FROM unnest(p.hours) AS h, unnest(p.minutes) AS mi ORDER BY 1);
    SELECT min(d) INTO in_day FROM (SELECT x - lag(x) OVER (ORDER BY x) AS d FROM unnest(t) AS x) s;
    IF (p.dom_any AND p.dow_any)
       OR (NOT p.dow_any AND cardinality(p.dows) = 7)   -- every weekday: every day of the months
       OR (NOT p.dom_any AND cardinality(p.doms) = 31 AND NOT p.dow_any) THEN
        day_gap := 1;
    ELSIF p.dom_any THEN
        SELECT min(coalesce(nxt, first_dow + 7) - w) INTO day_gap
        FROM (SELECT w, lead(w) OVER (ORDER BY w) AS nxt, min(w) OVER () AS first_dow
              FROM unnest(p.dows) AS w) s;
    ELSE
        SELECT min(d - prev) INTO day_gap
        FROM (SELECT d, lag(d) OVER (ORDER BY d) AS prev
              FROM (SELECT date '2000-01-01' + n AS d FROM generate_series(0, date '2032-01-01' - date '2000-01-01' - 1) AS n) days
              WHERE extract(month FROM d)::int = ANY (p.months)
                AND (extract(day FROM d)::int = ANY (p.doms)
                     OR (NOT p.dow_any AND extract(dow FROM d)::int = ANY (p.dows)))) s;
    END IF;
    best := day_gap * 1440 - (t[cardinality(t)] - t[1]);
    IF in_day < best THEN
        best := in_day;
    END IF;
    RETURN make_interval(days => best / 1440, mins => best % 1440);
END
$fn$;
