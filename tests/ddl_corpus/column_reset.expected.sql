SELECT ttl.disable_column('users', 'E-Mail');
