"""Byte-level transports below the protocols: the application's own stdio, event streams."""
