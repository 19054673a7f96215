"""Confining file tools to the session's working directory.

Every file tool resolves the model's path through :func:`resolve` before touching the
disk: the path is joined to the working directory, symlinks are resolved with
``os.path.realpath``, and the result must lie under the working directory's own real
path. A ``../`` climb, an absolute path elsewhere, or a symlink (file or directory) that
points out of the tree are all refused with the same message, so the model learns one
rule. The policy guardrail (:mod:`dsh_runtime.policy`) applies the same test to decide
what runs unasked; this module is what makes the refusal hard rather than advisory.
"""

from __future__ import annotations

import os

from dsh_runtime.tools.base import ToolResult


class PathEscapeError(ValueError):
    """A path resolves outside the working directory; the message is written for the model."""


def real_root(cwd: str) -> str:
    """The working directory with symlinks resolved: the boundary every path is held to."""
    return os.path.realpath(cwd)


def is_inside(root: str, target: str) -> bool:
    """Whether the real path ``target`` is ``root`` or lies under it."""
    try:
        return os.path.commonpath([root, target]) == root
    except ValueError:  # different drives (Windows)
        return False


def resolve(cwd: str, path: str) -> str:
    """The real absolute path of ``path`` (relative to ``cwd``), refused when it escapes.

    Missing components are allowed (``write_file`` creates them); whatever exists along
    the way is resolved, so a symlinked directory pointing out of the tree is caught.
    """
    if "\x00" in path:
        raise PathEscapeError(f"invalid path (contains a NUL byte): {path!r}")
    root = real_root(cwd)
    target = os.path.realpath(os.path.join(cwd, os.path.expanduser(path) if path.startswith("~")
                                           else path))
    if not is_inside(root, target):
        raise PathEscapeError(f"path escapes the working directory: {path} "
                              f"(resolves to {target}, outside {root})")
    return target


def shown(cwd: str, real: str) -> str:
    """How a resolved path is shown to the model: relative to the working directory."""
    rel = os.path.relpath(real, real_root(cwd))
    return "." if rel == os.curdir else rel


def escape_result(exc: PathEscapeError) -> ToolResult:
    """The tool error for a refused path."""
    return ToolResult(str(exc), is_error=True)
