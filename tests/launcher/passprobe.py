"""Trace one launch in this process and say how it resolved its profile.

:func:`main` (``OUT.json``, ``DSH-ARGS``) runs ``dsh.cli.main.main(DSH-ARGS)`` under a
profile hook (``sys.setprofile``) and writes to ``OUT.json``: the exit code;
``validate_name``, the profile name checks; ``ensure_dir``, each directory made or checked
with how often; ``profile_reads``, how often a ``profile.toml`` was read; ``plugin_dir``,
how often the profile's plugin folder was looked up; ``composed``, how often the layers
were resolved and composed (``dsh.config.resolve.resolve``); ``entries``, the calls into
``dsh/config/profiles.py`` from other modules, each as ``caller -> function``.
``tests/launcher/test_one_pass.py`` calls it in a fresh interpreter (:data:`CALL`, with
``OUT.json`` and the arguments after it); called so by hand against another tree
(``PYTHONPATH=OTHER/src``) it gives the figures to compare.
"""

from __future__ import annotations

import collections
import json
import sys
from types import FrameType
from typing import Any

CALL = ("import sys; sys.path.insert(0, {folder!r}); import passprobe; "
        "passprobe.main(sys.argv[1], sys.argv[2:])")
"""``python -c`` code that runs :func:`main` (``folder``: this file's)."""


def _module(frame: FrameType | None) -> str:
    if frame is None:
        return "?"
    path = frame.f_code.co_filename.replace("\\", "/")
    return path.rsplit("/src/", 1)[-1] if "/src/" in path else path.rsplit("/", 1)[-1]


def main(out: str, argv: list[str]) -> None:
    validate = 0
    reads = 0
    plugin_dir = 0
    composed = 0
    ensured: collections.Counter[str] = collections.Counter()
    entries: list[str] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal validate, reads, plugin_dir, composed
        if event != "call":
            return
        module, name = _module(frame), frame.f_code.co_name
        if module == "dsh/config/profiles.py":
            caller = _module(frame.f_back)
            if caller != module and name != "<module>":
                entries.append(f"{caller} -> {name}")
            validate += name == "validate_name"
            reads += name == "read_profile_text"
            plugin_dir += name == "plugin_dir"
        elif module == "dsh/config/resolve.py" and name == "resolve":
            composed += 1
        elif module == "dsh/core/home.py" and name == "ensure_dir":
            ensured[str(frame.f_locals["path"])] += 1

    sys.setprofile(hook)
    try:
        from dsh.cli.main import main as dsh_main

        dsh_main(argv)
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.setprofile(None)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"exit": code, "validate_name": validate, "ensure_dir": dict(ensured),
                   "profile_reads": reads, "plugin_dir": plugin_dir, "composed": composed,
                   "entries": entries}, f, indent=1)

