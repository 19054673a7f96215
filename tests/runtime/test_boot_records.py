"""Records on the boot path are NamedTuples or plain classes; plugin-facing ones keep
their keywords.

Creating a dataclass costs 0.3-1.2 ms at import (its ``__init__``, ``__repr__``,
``__eq__``, ``__setattr__``... are generated and ``exec``-ed) against ~0.05 ms for a
``typing.NamedTuple`` or a plain class, and ``dsh --profile sdk`` created dozens of them
before answering ``initialize`` (a benchmarked target, issue 3). The boot path is found in
a real process, as in :mod:`test_boot_imports`; only the records listed here stay
dataclasses.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import subprocess
from collections.abc import Callable

from test_boot_imports import OFFLINE_PATCH, imported_modules

from dsh.runtime.kernel.plugin import Command, ContextRequest, EnvVar, Manifest
from dsh.runtime.providers.base import (
    Exchange,
    Finish,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from dsh.runtime.tools.base import Image, ToolCall, ToolContext, ToolResult

RunDsh = Callable[..., subprocess.CompletedProcess[str]]

DATACLASSES_AT_BOOT = {  # all frozen
    # Not plain records: __post_init__ freezes the attributes / works out is_async.
    "dsh.runtime.kernel.hooks.Hook",
    "dsh.runtime.kernel.hooks.HookEvent",
    # Config values: as tuples they would read as lists, and compare equal to each other.
    "dsh.config.tags.EnvRef",
    "dsh.config.tags.HomeRef",
    "dsh.config.tags.PathRef",
}

PLUGIN_KEYWORDS: dict[type, tuple[str, ...]] = {
    Manifest: ("id", "version", "capabilities", "description", "config_schema", "provides",
               "requires", "env"),
    EnvVar: ("required", "default", "secret", "description", "routing"),
    Command: ("name", "help", "run"),
    ContextRequest: ("session_id", "cwd", "turn"),
    Image: ("mime_type", "data"),
    ToolResult: ("text", "is_error", "images", "diff", "facts"),
    ToolContext: ("session_id", "env", "cancelled", "get_cwd", "change_cwd", "emit", "history",
                  "images_supported", "boundary", "keep", "call_id", "client"),
    ToolCall: ("session_id", "call_id", "name", "arguments", "cwd", "tool", "can_ask",
               "outside", "root", "policy"),
    ToolSpec: ("name", "description", "parameters"),
    ModelRequest: ("session_id", "model", "messages", "tools", "max_tokens",
                   "reasoning_effort", "route"),
    TextDelta: ("text",),
    ReasoningDelta: ("text", "index", "signature", "redacted", "field"),
    ToolCallDelta: ("index", "id", "name", "arguments"),
    Usage: ("input_tokens", "output_tokens", "cache_hit_tokens", "cache_write_tokens",
            "reasoning_tokens", "cost_usd", "estimated"),
    Finish: ("reason",),
    Exchange: ("status", "retries"),
}


def test_boot_path_creates_no_other_dataclass(run_dsh: RunDsh) -> None:
    frame = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"cwd": "/"}}
    proc = run_dsh("--profile", "sdk", "--patch", str(OFFLINE_PATCH),
                   input=json.dumps(frame) + "\n", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = sorted(m for m in imported_modules(proc.stderr)
                     if m.split(".")[0] in ("dsh", "dsh_runtime") and not m.endswith("__main__"))
    assert "dsh.runtime.tools.base" in modules  # the measurement sees the boot
    found = set()
    for name in modules:
        for value in vars(importlib.import_module(name)).values():
            if (isinstance(value, type) and value.__module__ == name
                    and dataclasses.is_dataclass(value)):
                found.add(f"{name}.{value.__qualname__}")
    assert found == DATACLASSES_AT_BOOT


def test_plugin_records_keep_their_constructor_keywords() -> None:
    for cls, names in PLUGIN_KEYWORDS.items():
        assert tuple(inspect.signature(cls).parameters) == names, cls.__name__
    result = ToolResult("no such file", is_error=True)
    assert (result.text, result.is_error, result.images) == ("no such file", True, ())
    assert result._replace(is_error=False) == ToolResult("no such file")
    assert Manifest(id="x", version="1").env == {}
