"""dsh: an agent harness whose every application is launched as ``dsh --profile NAME``.

The package root stays import-light on purpose: ``dsh --version`` and ``import dsh.sdk``
must not pay for YAML, HTTP or the runtime kernel.
"""

from dsh._version import __version__

__all__ = ["__version__"]
