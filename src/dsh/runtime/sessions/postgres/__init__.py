"""``sessions-postgres``: the sessions service on a PostgreSQL database shared by hosts."""
