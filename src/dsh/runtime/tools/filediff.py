"""What a file tool changed, as a unified diff: the ``diff`` of a ``tool/result``.

``write_file`` and ``edit_file`` hand the agent, beside the text the model reads, a
:func:`file_diff` of the file before and after; the agent puts it in the ``tool/result``
event's ``data.diff`` (never in the message the model reads), so every client can show the
change: the web page colours it, a terminal chat or a "file changes" view can list it.
Its shape::

    {"path": "src/app.py",          # as the tool showed it (relative to the cwd)
     "kind": "add" | "update",      # the file was created, or existed
     "added": 3, "removed": 1,      # changed lines
     "unified": "--- a/src/app.py\\n+++ b/src/app.py\\n@@ -1,4 +1,6 @@\\n ...",
     "truncated": false}            # true when `unified` was cut at MAX_UNIFIED_CHARS

It is bounded: ``unified`` is cut, at a line's end, past :data:`MAX_UNIFIED_CHARS`; a side
larger than :data:`MAX_DIFF_INPUT_CHARS` (or an old file that is not UTF-8 text) is not
diffed at all, and the diff says why (``"omitted"``) with its counts null. Computing it
runs in the tool's worker thread, with the write.
"""

from __future__ import annotations

from typing import Any

MAX_UNIFIED_CHARS = 64 * 1024
"""The most of the unified diff text kept (the counts always cover all of it)."""
MAX_DIFF_INPUT_CHARS = 2 * 1024 * 1024
"""Larger files are not diffed (difflib's time grows faster than their size)."""
CONTEXT_LINES = 3


def file_diff(path: str, before: str | None, after: str) -> dict[str, Any]:
    """The change from ``before`` (None: the file did not exist) to ``after``, as the
    ``diff`` object described in the module doc."""
    kind = "add" if before is None else "update"
    if max(len(before or ""), len(after)) > MAX_DIFF_INPUT_CHARS:
        return omitted(path, kind, f"the file is over {MAX_DIFF_INPUT_CHARS // 1024 // 1024} "
                                   "MiB of text, too large to diff")
    import difflib  # on the first write, not at boot (spawn to initialize is timed)

    old = (before or "").splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    lines = difflib.unified_diff(old, new, "/dev/null" if before is None else f"a/{path}",
                                 f"b/{path}", n=CONTEXT_LINES)
    added = removed = 0
    kept: list[str] = []
    size = 0
    truncated = False
    for line in lines:
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
        if not line.endswith("\n"):  # a last line without one: say so, as diff(1) does
            line += "\n\\ No newline at end of file\n"
        if truncated or size + len(line) > MAX_UNIFIED_CHARS:
            truncated = True
            continue
        kept.append(line)
        size += len(line)
    return {"path": path, "kind": kind, "added": added, "removed": removed,
            "unified": "".join(kept), "truncated": truncated}


def omitted(path: str, kind: str, why: str) -> dict[str, Any]:
    """The ``diff`` of a change that was not diffed, saying ``why``."""
    return {"path": path, "kind": kind, "added": None, "removed": None, "unified": "",
            "truncated": False, "omitted": why}
