"""The runtime: the plugin kernel, agent loop, providers, tools, stores and applications.

Imported only when an application actually starts (never by ``dsh --version``, ``dsh -h``
or ``import dsh.sdk``). Its subpackages, bottom to top: ``kernel`` and ``transports``;
``tools`` and ``providers``; ``agent``; ``planning``, ``sessions``, ``mcp`` and
``subagents``; ``servers``; ``web`` and ``headless`` (``docs/architecture.md``).
"""
