"""Tools the model can call; every tool follows :class:`dsh.runtime.tools.base.Tool`."""
