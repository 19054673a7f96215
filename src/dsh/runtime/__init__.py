"""The runtime: the plugin kernel, agent loop, providers, tools, stores and applications.

Imported only when an application actually starts (never by ``dsh --version``, ``dsh -h``
or ``import dsh.sdk``). Its subpackages, bottom to top: ``kernel`` and ``transports``;
``tools`` and ``providers``; ``agent``; ``planning``, ``mcp`` and ``subagents``;
``sessions`` (which stores the goals ``planning`` defines); ``servers``; ``web``,
``headless`` and the process around them, ``app`` (``docs/architecture.md``; the
``runtime-layers`` contract of ``pyproject.toml``).
"""
