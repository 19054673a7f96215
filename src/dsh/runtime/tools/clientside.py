"""What a session's client does for its tools, when it offers to: an editor's own files
and terminal (ACP's ``fs/*`` and ``terminal/*`` client methods).

A protocol server whose client advertises these installs a :class:`ClientSide` per
session (``Agent.set_client_side``); a tool finds it as :attr:`ToolContext.client
<dsh.runtime.tools.base.ToolContext.client>` and uses it *after* its own checks, which do
not change: the path judged against the session's boundary (workspace root, granted
roots, protected directories, approvals) exactly as for a file dsh opens itself. What it
buys is the editor's view: ``read_file`` sees a buffer's unsaved text, ``write_file`` and
``edit_file`` go through the editor (which tracks them), a command shows in the editor's
terminal. What dsh itself opens keeps its symlink-safe open; a path sent to the client
names the file the boundary judged (:func:`client_path`).

Every method raises a :class:`~dsh.core.errors.DshError` when the client refuses, answers
something malformed, or does not answer within the server's bound; the tool turns that
into a result the model reads.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Protocol


class TerminalRun(NamedTuple):
    """How a command run in the client's terminal ended.

    ``output`` is what the terminal kept (the client drops the beginning beyond the byte
    limit: ``truncated``); ``exit_code`` and ``signal`` as the client reported them
    (``signal`` a name such as ``SIGKILL``); ``timed_out`` when dsh killed it at the
    call's timeout.
    """

    output: str
    truncated: bool
    exit_code: int | None
    signal: str | None
    timed_out: bool = False


class ClientSide(Protocol):
    """A client's offer to one session's tools (each capability as it advertised it)."""

    reads: bool
    writes: bool
    terminal: bool

    async def read_text_file(self, path: str) -> str:
        """The text of ``path`` (absolute) as the client has it, unsaved edits included."""
        ...

    async def write_text_file(self, path: str, content: str) -> None:
        """Have the client write ``content`` to ``path`` (absolute)."""
        ...

    async def run(self, argv: list[str], cwd: str, *, call_id: str, output_limit: int,
                  timeout: float) -> TerminalRun:
        """Run ``argv`` in ``cwd`` in a terminal of the client, shown with tool call
        ``call_id``; killed after ``timeout`` seconds, and when the call is cancelled.
        The terminal is released before this returns or raises."""
        ...


def client_path(cwd: str, path: str, real: str) -> str:
    """The absolute path to send the client for ``path`` (from ``cwd``), judged as
    ``real``: as the session spells it when that names the same file (an editor keys its
    buffers by the paths it opened, which may run through a symlinked directory), else
    ``real`` itself."""
    spelled = os.path.normpath(os.path.join(
        cwd, os.path.expanduser(path) if path.startswith("~") else path))
    return spelled if os.path.realpath(spelled) == real else real
