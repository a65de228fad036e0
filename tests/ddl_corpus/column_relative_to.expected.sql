SELECT ttl.enable_column('users', 'email', '1 day', 'write');
SELECT ttl.enable_column('users', 'phone', '2 days', 'row');
