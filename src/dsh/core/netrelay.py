"""The relay a bubblewrap-sandboxed command runs to reach the runtime's allow-list proxy.

Under bubblewrap the command keeps its own network namespace (no route out, its own
loopback), so the proxy cannot simply listen on the host's 127.0.0.1: the command could
not reach it, and sharing the host's network to let it would make the allow-list advisory
(any program ignoring ``HTTP_PROXY`` would go straight out). Instead the runtime listens
on a unix socket bound into the sandbox, and this relay, started inside in front of the
command, listens on the sandbox's own ``127.0.0.1:PORT`` (where ``HTTP_PROXY`` points)
and hands every connection it accepts to the runtime as a file descriptor
(``SCM_RIGHTS`` over the unix socket). The runtime then serves that connection itself,
so the relay copies no byte and holds no connection: its whole work is ``accept`` and
``sendmsg``.

It is a few lines of standard-library Python run by the runtime's own interpreter
(``python -I -S -c``; in the frozen runtime, the executable with :data:`FROZEN_FLAG`):
no binary the sandbox may lack (``socat``), at the cost of one interpreter start per
command that uses the allow-list under bubblewrap (measured beside the rung in
``scripts/benchlib/shell.py``). It listens before the command starts (no race), then
forks: the parent ``exec``\\s the command (same pid, same exit status), the child keeps
accepting with stdin, stdout and stderr on ``/dev/null`` (so it holds no output pipe)
and dies with the sandbox's pid namespace when the command's last process ends.

Arguments: the unix socket's path, the port, then the command.
"""

from __future__ import annotations

import sys

FROZEN_FLAG = "--dsh-netrelay"
"""First argument that makes the frozen runtime executable run :data:`SOURCE`."""

SOURCE = """\
import os, socket, sys
path, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
control.connect(path)
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(128)
if os.fork() == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        conn, _ = listener.accept()
        try:
            socket.send_fds(control, [b"c"], [conn.fileno()])
        except OSError:
            os._exit(0)
        conn.close()
listener.close()
control.close()
os.execvp(argv[0], argv)
"""
"""The relay itself (``python -I -S -c SOURCE PATH PORT COMMAND...``)."""


def argv(socket_path: str, port: int, command: list[str]) -> list[str]:
    """The command line that runs ``command`` behind the relay, with this interpreter."""
    if getattr(sys, "frozen", False):
        return [sys.executable, FROZEN_FLAG, socket_path, str(port), *command]
    return [interpreter(), "-I", "-S", "-c", SOURCE, socket_path, str(port), *command]


def interpreter() -> str:
    """The real interpreter binary behind this one (a venv's ``python`` is a link to it
    or names it in ``pyvenv.cfg``); with ``-I -S`` it needs only its own standard
    library, never the venv's packages."""
    import os

    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base if os.path.exists(base) else sys.executable)


def run_frozen() -> None:
    """The frozen runtime's entry for :data:`FROZEN_FLAG` (arguments after it)."""
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    exec(compile(SOURCE, "<dsh-netrelay>", "exec"), {"__name__": "__main__"})
