CREATE TABLE carts (id int PRIMARY KEY) WITH (ttl_expire_after = '1 day');
