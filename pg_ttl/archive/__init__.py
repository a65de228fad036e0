"""Archive targets of tiers: where expiring rows go before they are deleted
(``storage``: a directory for now) and how they are written (``parquet``);
``restore`` brings archived rows back."""
