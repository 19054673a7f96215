"""The single source of the dsh version (read by hatchling and by ``dsh --version``)."""

__version__ = "0.1.0"
