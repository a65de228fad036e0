SELECT ttl.enable_column('users', 'email', '90 days');
