"""The ``bash`` tool's command in the client's terminal, confined as dsh confines it.

When the session's client offers a terminal (ACP ``terminal/*``), a foreground command
shows there, live, instead of running unseen; but the client runs what it is given with
the editor's rights, so it is never given the model's raw command. It is given the shell
policy's own launcher: ``dsh sandbox --home HOME --profile P --patch F... --row ROW
--quiet -- bash -c COMMAND`` (``dsh.cli.sandboxrun``), which composes the same profile and
applies the row's sandbox rung, network policy, resource limits and environment filter
exactly as the tool would, the dsh home and protected paths hidden. ``--quiet`` leaves
only the notes a native result starts with, so the model reads the same text either way.

``dsh sandbox`` takes its working directory as the workspace root, so the terminal starts
in the session's root and the command moves to its own directory first; a command whose
directory is outside the root, a background job, a shell other than a POSIX one, or a
runtime without a launch to repeat (an in-process kernel) runs as before, in dsh.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from dsh.core.errors import DshError
from dsh.runtime.tools.base import ToolResult
from dsh.runtime.tools.clientside import ClientSide


class Routed(NamedTuple):
    """A command ready for the client's terminal: its argv and where it starts."""

    argv: list[str]
    cwd: str


def route(launch: Any, row_id: str, shell: Sequence[str], cwd: str,
          root: str) -> Routed | None:
    """The ``dsh sandbox`` command line running ``shell`` (``[bash, -c, COMMAND]``) in
    ``cwd`` under row ``row_id`` of ``launch``'s profile; None when it cannot be routed
    (see the module doc)."""
    if launch is None or len(shell) != 3 or shell[1] != "-c":
        return None
    real = os.path.realpath(cwd)
    if os.path.commonpath([real, root]) != root:
        return None
    command = shell[2]
    if real != root:
        command = f"cd -- {shlex.quote(os.path.relpath(real, root))} || exit 1\n{command}"
    argv = [*dsh_command(), "sandbox", "--home", str(launch.home), "--profile", launch.profile]
    for patch in patch_files(launch):
        argv += ["--patch", patch]
    argv += ["--row", row_id, "--quiet", "--", shell[0], "-c", command]
    return Routed(argv, root)


def dsh_command() -> list[str]:
    """How this runtime's ``dsh`` is run again: the frozen executable takes the ``dsh``
    command line itself; the python carrier is ``python -m dsh``."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "dsh"]


def patch_files(launch: Any) -> list[str]:
    """The launch's ``--patch`` files, in order, as absolute paths."""
    layers = (getattr(launch, "effective_config", None) or {}).get("layers") or ()
    return [str(Path(layer["source"]).resolve()) for layer in layers
            if isinstance(layer, Mapping) and layer.get("kind") == "patch"]


async def run(client: ClientSide, routed: Routed, *, call_id: str,
              config: Mapping[str, Any], timeout: float) -> ToolResult:
    """Run ``routed`` in the client's terminal; the result as a native run words it."""
    try:
        ran = await client.run(routed.argv, routed.cwd, call_id=call_id,
                               output_limit=int(config["max_output_chars"]), timeout=timeout)
    except DshError as exc:
        return ToolResult(f"the client's terminal did not run the command: {exc}",
                          is_error=True)
    text = ran.output
    if ran.truncated:
        text = (f"[... the beginning of the output was dropped: the terminal keeps its last "
                f"{config['max_output_chars']} bytes ...]\n{text}")
    if text and not text.endswith("\n"):
        text += "\n"
    if ran.timed_out:
        return ToolResult(f"{text}[Command timed out after {timeout:g} seconds; it was "
                          "killed]", is_error=True)
    return ToolResult(f"{text}[Command finished with exit code {exit_status(ran)}]")


def exit_status(ran: Any) -> int:
    """The exit code a shell would report: the code, or 128 + the signal's number."""
    if ran.exit_code is not None:
        return int(ran.exit_code)
    name = str(ran.signal or "")
    try:
        number = int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        return -1
    return 128 + number
