"""Tools the model can call; every tool follows :class:`dsh_runtime.tools.base.Tool`."""
