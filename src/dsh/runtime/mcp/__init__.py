"""MCP client support: the ``mcp-servers`` plugin (``plugin``), server specs (``config``),
one server's connection (``connection``) and the tool adapter (``tools``)."""
