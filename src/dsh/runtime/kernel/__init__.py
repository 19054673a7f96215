"""The runtime's kernel: plugin rows loaded, registered, started, reconciled and disposed.

Everything else in :mod:`dsh.runtime` is a plugin the kernel loads (tools, providers, the
agent, stores, servers) or the process around it (:mod:`dsh.runtime.app`). The kernel
knows no agent and no protocol; the plugin API authors import is :mod:`.plugin`.
"""
