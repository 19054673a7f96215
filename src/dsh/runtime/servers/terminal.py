"""A stdio protocol server started at a terminal says what it is, once, and serves on.

``dsh --profile sdk`` and ``dsh --profile acp`` read JSON-RPC frames on stdin. Typed at a
terminal they printed nothing and waited, which reads as a hang. When their input is a
terminal they now write one line on stderr: what they speak, for whom, and what a person
wants instead. They still serve: a program may give them a pseudo-terminal on purpose.
"""

from __future__ import annotations

import os
import sys

FOR_PEOPLE = ('to run a task type `dsh --profile headless "TASK"`, for a page in the '
              "browser `dsh web`; Ctrl-D quits")


def hint_at_terminal(read_fd: int, line: str) -> None:
    """Write ``line`` on stderr when ``read_fd`` (the server's input) is a terminal."""
    try:
        if not os.isatty(read_fd):
            return
    except OSError:
        return
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
