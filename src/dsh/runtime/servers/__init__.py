"""Protocol servers: the JSON-RPC peer and the applications built on it (SDK, later ACP)."""
