-- nothing here is TTL DDL: copied byte for byte
CREATE   TABLE t (a int)   WITH (fillfactor=70)  ;
select 'USING TTL 5' /* using ttl 5 */ ; DELETE FROM t USING ttl WHERE t.a = ttl.a;
CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;
ALTER TABLE t SET (toast.ttl_expire_after = 1)
