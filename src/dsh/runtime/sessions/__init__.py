"""The ``sessions-sqlite`` plugin: sessions, their event logs and workspaces in SQLite."""
