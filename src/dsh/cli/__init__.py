"""The ``dsh`` command line: the launcher (:mod:`dsh.cli.main`), its subcommands, the
doctor and the plugin manager. The top layer: it may use every other one.
"""
