"""An application's own command line (``dsh web``, ``dsh --profile headless``), read by click.

dsh reads command lines with two parsers, each for a reason (``docs/architecture.md``):
the launcher's hand scanner (:mod:`dsh.cli.argv`), which runs on every launch and must
stop at the first token it does not own, and click for everything else: the launcher's
subcommands and the applications' options. This runs a click command's parser alone:
nothing is printed, nothing exits, ``-h`` is not an option (the application runner
answers it before anything starts), and a bad command line comes back as click's
exception, for the application to word as its :class:`~dsh.core.errors.UsageError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click


def parse(command: click.Command, argv: Sequence[str]) -> dict[str, Any]:
    """``argv`` read by ``command``'s options and arguments, as click's ``params``.

    Raises :class:`click.NoSuchOption` for an unknown option, :class:`click.BadOptionUsage`
    for an option without its value and :class:`click.UsageError` for anything else.
    """
    context = command.make_context(command.name, list(argv))
    return dict(context.params)


def command(name: str, params: list[click.Parameter]) -> click.Command:
    """A command that only parses: no callback, no help option, no abbreviations."""
    return click.Command(name, params=params, add_help_option=False,
                         context_settings={"help_option_names": []})
