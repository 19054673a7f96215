"""Moved to :mod:`dsh.runtime.tools`; only ``dsh_runtime.tools.base`` is kept, for one release."""
