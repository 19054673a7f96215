"""The bubblewrap rung: the ``bwrap`` command line that keeps a shell row's policy.

What a sandboxed command sees (the inputs are the layout :mod:`dsh.runtime.tools.sandbox`
works out for every rung): ``/`` read-only, the workspace root and its granted roots
read-write (``workspace-write``) or read-only, a private empty ``/tmp``, a minimal
``/dev``, its own ``/proc``, its own pid namespace and, unless the network is allowed, its
own network namespace with only a loopback device.

No home secrets: the user's home and the dsh home are each covered by an empty tmpfs,
except the workspace root when it lies strictly inside one of them; the dsh home's
``.env`` is masked even then, and the names that file set are removed from the
environment before bwrap starts (``env -u NAME``, so not even its own ``/proc/PID/environ``
keeps them): a secret is neither readable on disk nor inherited. The dsh home and the
other protected directories are never writable: one that is the workspace root, or lies
inside it, is covered again after the root is bound.

Mounts are ordered shallow to deep, a cover before a bind at the same path, so whichever of
"hide the home" and "show the workspace" names the deeper path wins; a protected
directory's second cover comes after every bind at its depth. Capabilities
are dropped (a root caller could otherwise remount the read-only root writable). The
command gets its own pid namespace: without it, it could see the unsandboxed runtime in
``/proc``, signal it, or ptrace it (same uid) and so leave the sandbox. Process ids a
sandboxed command reports are therefore the namespace's own; every process it starts dies
with the namespace's first process, on top of the shell tool's process-group kill.

Whether bubblewrap works is decided by running it once per process (cached), with the
same namespace options a command gets: a container may ship the binary but forbid the
user namespaces it needs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence

from dsh.core import process
from dsh.runtime.kernel.envpolicy import scrubbed

PROBE_TIMEOUT = 10.0
"""Seconds the one trial run of bwrap may take before it counts as unusable."""


def trial(exe: str, network: bool) -> tuple[bool, str]:
    """Run ``true`` under the options every command gets; any failure is the reason."""
    argv = [exe, *_namespaces(network), *_ROOT, "--tmpfs", "/tmp", *_KERNEL, "true"]
    try:
        proc = process.run(argv, timeout=PROBE_TIMEOUT, env=scrubbed(os.environ))
    except OSError as exc:
        return False, f"bwrap cannot be started: {exc.strerror or exc}"
    if proc.timed_out:
        return False, f"bwrap did not finish a trial run within {PROBE_TIMEOUT:g} s"
    if proc.returncode == 0:
        return True, ""
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    detail = lines[-1] if lines else f"exit status {proc.returncode}"
    return False, f"bwrap cannot create its sandbox here ({detail})"


def argv(exe: str, command: Sequence[str], *, network: bool, writable: bool,
         roots: Sequence[str], hidden: Sequence[str], readable: Iterable[str],
         masked: Iterable[str], private: Sequence[str], cwd: str,
         binds: Sequence[str] = ()) -> list[str]:
    """``command`` under ``exe`` (bwrap) with the layout's mounts, run in ``cwd``;
    ``binds`` are host folders bound writable at their own path (the relay's socket)."""
    extra = [option for path in binds for option in ("--bind", path, path)]
    return [exe, *_namespaces(network), *_ROOT,
            *_mounts(writable, roots, hidden, readable, masked, private), *extra,
            *_KERNEL, "--chdir", cwd, *command]


def _namespaces(network: bool) -> list[str]:
    """The namespace and privilege options every sandboxed command gets."""
    options = ["--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
    if not network:
        options.append("--unshare-net")
    return options


_ROOT = ["--ro-bind", "/", "/"]
"""The first mount: the host's filesystem, read-only."""
_PROC = "/proc"  # platform: bwrap's mount point in its argv, Linux-only
_KERNEL = ["--dev", "/dev", "--proc", _PROC]
"""The last mounts: a minimal /dev and the sandbox's own /proc, over any bind of ``/``."""


def _depth(path: str) -> int:
    return len([part for part in path.split("/") if part])


def _mounts(writable: bool, roots: Sequence[str], hidden: Sequence[str],
            readable: Iterable[str], masked: Iterable[str],
            private: Sequence[str] = ()) -> list[str]:
    """Mount options, shallow paths first; at equal depth a cover comes before a bind.

    A ``readable`` path is bound only where a cover hid it: elsewhere the read-only root
    already shows it, and binding, say, ``/`` again would bring back the host's ``/proc``.
    Each ``private`` directory (the dsh home, protected paths) that is a workspace root or
    lies in one is covered once more after every bind at its depth, so binding that root
    does not bring it back; one above the root (a workspace kept in the home) stays
    covered by its first tmpfs, below which the root's bind shows the workspace. Every
    private cover is made read-only at the end.
    """
    covers = ["/tmp", *hidden]
    plan: list[tuple[int, int, list[str]]] = [(_depth(path), 0, ["--tmpfs", path])
                                              for path in covers]
    for path in readable:
        real = os.path.realpath(path)
        if os.path.exists(real) and any(_inside(real, cover) for cover in covers):
            plan.append((_depth(real), 1, ["--ro-bind", real, real]))
    bind = "--bind" if writable else "--ro-bind"
    plan += [(_depth(root), 2, [bind, root, root]) for root in roots if os.path.isdir(root)]
    plan += [(_depth(path), 3, ["--ro-bind", "/dev/null", path]) for path in masked]
    recovered = [path for path in private if any(_inside(path, root) for root in roots)]
    plan += [(_depth(path), 4, ["--tmpfs", path]) for path in recovered]
    plan.sort(key=lambda item: (item[0], item[1]))
    # Read-only last, once every mount point beneath has been made in the cover: a write
    # there fails instead of vanishing with the sandbox (a root bound beneath, its own
    # mount, stays writable).
    return [*(option for _, _, options in plan for option in options),
            *(option for path in private for option in ("--remount-ro", path))]


def unset(names: Sequence[str]) -> list[str]:
    """``env -u NAME ...`` for each of ``names`` (those the dsh home's ``.env`` set).

    Removed before bwrap runs rather than with its ``--unsetenv``: bwrap's own process (the
    sandbox's pid 1) would otherwise keep the values in its readable ``/proc/1/environ``.
    """
    if not names:
        return []
    return [shutil.which("env") or "/usr/bin/env",
            *(option for name in names for option in ("-u", name))]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
