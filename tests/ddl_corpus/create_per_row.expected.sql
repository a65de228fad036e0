CREATE TABLE carts (id integer PRIMARY KEY);
SELECT ttl.set_options('carts', CAST('{"expire_after": "1 day"}' AS jsonb));
