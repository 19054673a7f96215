"""dsh_runtime: the plugin kernel, agent loop, providers, tools and protocol servers.

Imported only when an application actually starts (never by ``dsh --version``, ``dsh -h``
or ``import dsh.sdk``).
"""
