"""An option's value on a hand-scanned command line: ``--name VALUE`` or ``--name=VALUE``.

The launcher (:mod:`dsh.cli.argv`, scanned by hand so a launch starts before click is
imported) and the terminal chat (:mod:`dsh.chat.launch`) take their values this one way,
with the same refusals: no value, or an empty one.
"""

from __future__ import annotations

from dsh.core.errors import UsageError


def take(args: list[str], i: int, name: str, inline: str | None, *,
         said: str = "") -> tuple[str, int]:
    """The value of option ``name`` found at ``args[i]``: ``inline`` (what followed its
    ``=``, None when it had none) or the next token; with the index of the last token it
    used. UsageError, its message starting with ``said``, when there is no value or an
    empty one."""
    if inline is not None:
        value = inline
    elif i + 1 < len(args):
        i += 1
        value = args[i]
    else:
        raise UsageError(f"{said}{name} needs a value")
    if not value:
        raise UsageError(f"{said}{name} needs a non-empty value")
    return value, i
