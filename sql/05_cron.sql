-- Cron expressions, checked in the database so every entry point agrees with
-- the worker's scheduler (croniter). Returns NULL when valid, else the reason.
CREATE OR REPLACE FUNCTION ttl.cron_error(expr text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF expr IS NULL OR btrim(expr) = '' THEN
        RETURN 'must not be empty';
    END IF;
    IF lower(btrim(expr)) IN ('@hourly', '@daily', '@midnight', '@weekly', '@monthly', '@yearly', '@annually') THEN
        RETURN NULL;
    END IF;
    IF array_length(regexp_split_to_array(btrim(expr), '\s+'), 1) <> 5 THEN
        RETURN format('"%s" must have 5 fields (minute hour day-of-month month day-of-week)', expr);
    END IF;
    RETURN NULL;
END
$fn$;

-- Shortest time between two consecutive runs of a valid expression.
CREATE OR REPLACE FUNCTION ttl.cron_min_interval(expr text) RETURNS interval
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN NULL;  -- not computed yet: no minimum enforced
END
$fn$;
