ALTER TABLE IF EXISTS ONLY public.gone SET (ttl_pause = on);
