"""The shell tool's sandbox: bubblewrap (``bwrap``) on Linux, Seatbelt on macOS.

On macOS the same policy is a generated Seatbelt profile run by ``sandbox-exec``
(:mod:`dsh.runtime.tools.seatbelt`, whose docstring says what differs); Windows has no
sandbox dsh can use, so there every command runs unsandboxed and says so (or is refused
when the row requires the sandbox). The rest of this docstring is the Linux sandbox.

The shell row's ``sandbox`` config is a :class:`Policy`:

- ``mode``: ``off`` (a plain ``bash -c``), ``read-only`` (the whole filesystem read-only,
  the workspace too) or ``workspace-write`` (the session's workspace root and its granted
  roots read-write, the rest read-only; the root, not the moving working directory).
  Both sandboxed modes get a private, empty ``/tmp`` that vanishes with the command,
  because compilers and test runners need scratch space and writes there reach nothing
  outside.
- ``network``: ``false`` gives the command its own network namespace with only a loopback
  device, so no connection leaves it (not even to the host's 127.0.0.1).
- ``required``: when bubblewrap cannot run, every command is refused with a clear tool
  error instead of running unsandboxed. Not required, the command runs unsandboxed and its
  result says so in one line.
- ``readable``: paths shown read-only although they lie in a hidden home (toolchains such
  as ``~/.cargo`` or a virtualenv kept in the home).
- ``hide``: more paths covered by an empty tmpfs like the homes (a sub-agent's shell
  gets its parent's dsh home here, since the child's own home lies inside it).
- ``path_toolchains`` (default true): every ``PATH`` entry inside a hidden home is shown
  read-only too, with its toolchain root when the entry is a ``bin`` or ``shims`` folder
  (``~/.pyenv/shims`` shows ``~/.pyenv``), so a sandboxed ``python3`` or ``cargo`` is the
  same program the user runs outside; without it a pyenv or rustup user would silently get
  the system's interpreter or none.

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

import contextlib
import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from dsh.core import process
from dsh.core.errors import ConfigError, DshError
from dsh.runtime.kernel.envpolicy import scrubbed
from dsh.runtime.tools import seatbelt
from dsh.runtime.tools.confine import config_paths

_LINUX = sys.platform.startswith("linux")
_MACOS = sys.platform == "darwin"

OFF = "off"
READ_ONLY = "read-only"
WORKSPACE_WRITE = "workspace-write"
MODES = (OFF, READ_ONLY, WORKSPACE_WRITE)

CONFIG_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "default": {},
    "description": "Run each command inside a sandbox: bubblewrap on Linux, Seatbelt on "
                   "macOS (none on Windows).",
    "properties": {
        "mode": {"type": "string", "enum": list(MODES), "default": OFF,
                 "description": "off, read-only, or workspace-write (cwd writable)."},
        "network": {"type": "boolean", "default": False,
                    "description": "Let sandboxed commands use the network."},
        "required": {"type": "boolean", "default": False,
                     "description": "Refuse commands when the sandbox cannot run, "
                                    "instead of running them unsandboxed."},
        "readable": {"type": "array", "items": {"type": "string"}, "default": [],
                     "description": "Absolute or ~/ paths shown read-only inside a "
                                    "hidden home."},
        "hide": {"type": "array", "items": {"type": "string"}, "default": [],
                 "description": "Absolute or ~/ paths hidden like the homes."},
        "path_toolchains": {"type": "boolean", "default": True,
                            "description": "Show PATH entries inside a hidden home (and "
                                           "their bin/shims parent) read-only."},
        "bwrap": {"type": "string", "default": "",
                  "description": "The bubblewrap executable; default bwrap on PATH."},
    },
    "additionalProperties": False,
}
"""The ``sandbox`` key of the shell row's config schema."""

_PROBE_TIMEOUT = 10.0
"""Seconds the one trial run of bwrap may take before it counts as unusable."""


class SandboxUnavailableError(DshError):
    """A required sandbox cannot run; the message is written for the model."""


class Policy(NamedTuple):
    """One shell row's sandbox settings, checked."""

    mode: str = OFF
    network: bool = False
    required: bool = False
    readable: tuple[str, ...] = ()
    bwrap: str = ""
    path_toolchains: bool = True
    hide: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, *, row_id: str = "shell") -> Policy:
        """The policy of a validated ``sandbox`` config; contradictions are config errors."""
        config = config or {}
        mode = config.get("mode", OFF)
        where = f"row '{row_id}' config.sandbox"
        if mode not in MODES:
            raise ConfigError(f"{where}.mode: expected one of {', '.join(MODES)}")
        if config.get("required") and mode == OFF:
            raise ConfigError(f"{where}.required: true needs mode read-only or "
                              "workspace-write, not off")
        return cls(mode, bool(config.get("network")), bool(config.get("required")),
                   config_paths(config, "readable", where), config.get("bwrap", ""),
                   bool(config.get("path_toolchains", True)),
                   config_paths(config, "hide", where))

    def to_config(self) -> dict[str, Any]:
        """The ``sandbox`` config that gives this policy (what a sub-agent's shell inherits)."""
        return {"mode": self.mode, "network": self.network, "required": self.required,
                "readable": list(self.readable), "bwrap": self.bwrap,
                "path_toolchains": self.path_toolchains, "hide": list(self.hide)}

    def sentence(self) -> str:
        """What the model is told about the sandbox in the tool description ('' when off)."""
        if self.mode == OFF:
            return ""
        writable = ("nothing is writable but a private /tmp" if self.mode == READ_ONLY else
                    "only the working directory and a private /tmp are writable")
        network = "network access is allowed" if self.network else "there is no network access"
        return (f"Commands run in a sandbox: {writable}, the home directory is hidden, and "
                f"{network}; a refused write or connection fails inside the command.")

    def describe(self) -> str:
        """The policy in a few words, for the tool description and ``dsh doctor``."""
        if self.mode == OFF:
            return "off"
        return (f"{self.mode}, network {'allowed' if self.network else 'off'}"
                f"{', required' if self.required else ''}")


class Probe(NamedTuple):
    """Whether bubblewrap can sandbox commands here; ``reason`` says why not."""

    usable: bool
    reason: str = ""


_PROBES: dict[tuple[str, bool], Probe] = {}
"""Trial results by (bwrap path, network allowed): namespaces do not appear mid-run."""


def kind() -> str:
    """The sandbox this platform uses: ``bubblewrap``, ``seatbelt`` or ``none``."""
    return "bubblewrap" if _LINUX else "seatbelt" if _MACOS else "none"


def probe(policy: Policy) -> Probe:
    """Whether ``policy``'s sandbox runs here, trying it once per process.

    A missing binary is looked up again on every call (cheap, and installing it then
    takes effect); a binary that failed its trial stays failed until the process ends.
    """
    if _MACOS:
        return _probe_seatbelt(policy.network)
    if not _LINUX:
        if sys.platform == "win32":
            return Probe(False, "Windows has no sandbox dsh can use (commands run with "
                                "your rights)")
        return Probe(False, f"dsh has no sandbox for {sys.platform}")
    name = policy.bwrap or "bwrap"
    exe = shutil.which(name)
    if exe is None:
        return Probe(False, f"{os.path.basename(name)} was not found (install the "
                            "bubblewrap package)")
    key = (exe, policy.network)
    if key not in _PROBES:
        _PROBES[key] = _trial(exe, policy.network)
    return _PROBES[key]


def _trial(exe: str, network: bool) -> Probe:
    """Run ``true`` under the options every command gets; any failure is the reason."""
    argv = [exe, *_namespaces(network), *_ROOT, "--tmpfs", "/tmp", *_KERNEL, "true"]
    try:
        proc = process.run(argv, timeout=_PROBE_TIMEOUT, env=scrubbed(os.environ))
    except OSError as exc:
        return Probe(False, f"bwrap cannot be started: {exc.strerror or exc}")
    if proc.timed_out:
        return Probe(False, f"bwrap did not finish a trial run within {_PROBE_TIMEOUT:g} s")
    if proc.returncode == 0:
        return Probe(True)
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    detail = lines[-1] if lines else f"exit status {proc.returncode}"
    return Probe(False, f"bwrap cannot create its sandbox here ({detail})")


def _probe_seatbelt(network: bool) -> Probe:
    """Run ``/usr/bin/true`` under a profile generated as every command's is (so a macOS
    that rejects its syntax, or an outer sandbox that forbids a nested one, shows here)."""
    key = (seatbelt.SANDBOX_EXEC, network)
    if key in _PROBES:
        return _PROBES[key]
    if not os.access(seatbelt.SANDBOX_EXEC, os.X_OK):
        return Probe(False, f"{seatbelt.SANDBOX_EXEC} was not found")
    text = seatbelt.profile(writable=True, network=network, roots=(), hidden=(),
                            readable=(), masked=(), private=(), scratch=())
    try:
        proc = process.run(seatbelt.argv(text, ["/usr/bin/true"]), timeout=_PROBE_TIMEOUT,
                           env=scrubbed(os.environ))
    except OSError as exc:
        found = Probe(False, f"sandbox-exec cannot be started: {exc.strerror or exc}")
    else:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        found = Probe(True) if proc.returncode == 0 and not proc.timed_out else Probe(
            False, "sandbox-exec cannot apply a profile here ("
            + (lines[-1] if lines else f"exit status {proc.returncode}") + ")")
    _PROBES[key] = found
    return found


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


def wrap(policy: Policy, argv: Sequence[str], cwd: str, *, workspace: str | None = None,
         writable: Sequence[str] = (), protected: Sequence[str] = (),
         home: str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    """``argv`` as it runs under ``policy`` in ``cwd``.

    ``workspace`` is the session's workspace root, the one ``workspace-write`` makes
    writable (default ``cwd``), and ``writable`` its granted roots, writable too; a
    ``cwd`` outside all of them stays read-only (and is shown even in a hidden home, so
    the command can start there). ``home`` is the dsh home and ``protected`` the other
    directories no command may see (each hidden, never writable); ``env`` is the
    environment the process will be given (names the dsh home's ``.env`` set are removed
    before bwrap starts). Returns ``argv`` unchanged when the mode is off, or when
    bubblewrap is unusable and not required; raises :class:`SandboxUnavailableError` when it
    is unusable and required. (Tying the command to the runtime and its resource limits
    are :mod:`dsh.core.process`'s, for sandboxed and unsandboxed commands alike.)
    """
    if policy.mode == OFF:
        return list(argv)
    found = probe(policy)
    if not found.usable:
        if policy.required:
            raise SandboxUnavailableError(
                f"Refused: this profile requires the {policy.mode} sandbox for shell "
                f"commands, but {found.reason}. The command was not run.")
        return list(argv)
    real_cwd = os.path.realpath(cwd)
    roots = list(dict.fromkeys(os.path.realpath(p) for p in (workspace or cwd, *writable)))
    shown = [] if any(_inside(real_cwd, root) for root in roots) else [real_cwd]
    secrets = os.path.join(home, ".env") if home else None
    masked = [os.path.realpath(secrets)] if secrets and os.path.isfile(secrets) else []
    private = _hidden_dirs(home, protected, user=False)
    hidden = _hidden_dirs(home, (*policy.hide, *protected))
    readable = [*policy.readable, *shown]
    if policy.path_toolchains:
        search = (env if env is not None else os.environ).get("PATH", "")
        readable += toolchains(search, hidden, home)
    if _MACOS:
        text = seatbelt.profile(
            writable=policy.mode == WORKSPACE_WRITE, network=policy.network,
            roots=[root for root in roots if os.path.isdir(root)], hidden=hidden,
            readable=[os.path.realpath(p) for p in readable if os.path.exists(p)],
            masked=masked, private=private, scratch=scratch_dirs())
        return [*_without(env, secrets), *seatbelt.argv(text, argv)]
    exe = shutil.which(policy.bwrap or "bwrap") or "bwrap"
    return [*_without(env, secrets), exe, *_namespaces(policy.network), *_ROOT,
            *_mounts(policy, roots, hidden, readable, masked, private),
            *_KERNEL, "--chdir", real_cwd, *argv]


def scratch_dirs() -> list[str]:
    """Where a Seatbelt-sandboxed command may write scratch files (real paths): the
    machine's ``/tmp`` and this user's temporary folder (``TMPDIR``)."""
    import tempfile

    found: list[str] = []
    for path in ("/tmp", tempfile.gettempdir()):
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in found:
            found.append(real)
    return found


def toolchains(search_path: str, hidden: Sequence[str], home: str | None = None) -> list[str]:
    """The ``PATH`` entries inside a hidden directory, a ``bin``/``shims`` entry as its parent.

    The parent matters because a launcher in ``bin`` usually runs code beside it
    (``~/.pyenv/shims/python`` execs ``~/.pyenv/versions/...``). The dsh home itself is
    never shown this way, whatever PATH says.
    """
    found: list[str] = []
    private = os.path.realpath(home) if home else None
    for entry in search_path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry)
        if private is not None and _inside(real, private):
            continue
        cover = next((h for h in hidden if _inside(real, h)), None)
        if cover is None or real == cover:
            continue
        if os.path.basename(real) in ("bin", "shims") and os.path.dirname(real) != cover:
            real = os.path.dirname(real)
        if real not in found:
            found.append(real)
    return found




def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def in_force(policy: Policy) -> str:
    """The rung that confines a command under ``policy`` here: ``off`` (the mode),
    ``bubblewrap`` or ``seatbelt`` (:func:`kind`, when it runs), or ``none`` (it cannot
    run, so the command runs unsandboxed, or is refused when the policy requires it)."""
    if policy.mode == OFF:
        return OFF
    return kind() if probe(policy).usable else "none"


def note(policy: Policy) -> str:
    """The one line a result carries when the command ran without its sandbox ('' if not).

    Empty for mode off (nothing was promised) and when required (nothing ran).
    """
    if policy.mode == OFF or policy.required:
        return ""
    found = probe(policy)
    if found.usable:
        return ""
    return f"[Not sandboxed: {found.reason}; this command ran without the {policy.mode} sandbox]"


def _hidden_dirs(home: str | None, more: Sequence[str] = (), *,
                 user: bool = True) -> list[str]:
    """The user's home (unless ``user`` is false), the dsh home and ``more``, as real
    existing directories but ``/``."""
    candidates = [os.path.expanduser("~"), os.environ.get("HOME", "")] if user else []
    candidates += [home or "", *more]
    if user and hasattr(os, "getuid"):
        import pwd

        # A uid without a passwd entry (common in containers) has no home there.
        with contextlib.suppress(KeyError):
            candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    found: list[str] = []
    for path in candidates:
        real = os.path.realpath(path) if path else ""
        # A sandbox mounts a /proc of its own: the host's is never what it sees.
        if real and real != "/" and not _inside(real, _PROC) and os.path.isdir(real) \
                and real not in found:
            found.append(real)
    return found


def _depth(path: str) -> int:
    return len([part for part in path.split("/") if part])


def _mounts(policy: Policy, roots: Sequence[str], hidden: Sequence[str],
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
    bind = "--bind" if policy.mode == WORKSPACE_WRITE else "--ro-bind"
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


def _without(env: Mapping[str, str] | None, secrets: str | None) -> list[str]:
    """``env -u NAME ...`` for each name whose value came from the dsh home's ``.env``.

    Removed before bwrap runs rather than with its ``--unsetenv``: bwrap's own process (the
    sandbox's pid 1) would otherwise keep the values in its readable ``/proc/1/environ``.
    """
    origin = getattr(env, "origin", None)
    if env is None or secrets is None or origin is None:
        return []
    names = [name for name in sorted(env)
             if os.path.normpath(origin(name) or "/") == os.path.normpath(secrets)]
    if not names:
        return []
    return [shutil.which("env") or "/usr/bin/env",
            *(option for name in names for option in ("-u", name))]
