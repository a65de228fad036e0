SELECT ttl.set_options(pg_catalog.to_regclass('public.gone'), CAST('{"pause": "on"}' AS jsonb)) WHERE pg_catalog.to_regclass('public.gone') IS NOT NULL;
