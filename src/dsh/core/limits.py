"""Resource limits for commands: a cgroup where dsh can make one, rlimits otherwise.

Part of process control (:mod:`dsh.core.process` applies it; this module only plans and keeps
the cgroup directories, it never starts or signals a process). A shell command and a
background job run with four bounds, set per shell row (``config.limits``), each ``0`` for
none:

=============== ====================== ==============================================
key             default                enforced by
=============== ====================== ==============================================
``memory_mb``   3/4 of the machine's   cgroup ``memory.max`` (all of the command's
                memory                 processes together), else ``RLIMIT_DATA`` (each
                                       process)
``processes``   4096                   cgroup ``pids.max`` (the command's tasks), else
                                       ``RLIMIT_NPROC`` (all of the user's; root is
                                       exempt from it)
``file_size_mb`` 16384                 ``RLIMIT_FSIZE`` (each file a process writes)
``cpu_seconds`` 3600                   ``RLIMIT_CPU`` (each process)
=============== ====================== ==============================================

The defaults are far above what a build or a test run takes, and well below what takes a
machine down. Why a cgroup first: root ignores ``RLIMIT_NPROC``, so a fork bomb run as
root (CI machines, containers) is bounded only by a ``pids.max``; and ``RLIMIT_AS`` breaks
V8 and Go, which reserve huge address ranges they never use, so memory is bounded by
``memory.max`` or by ``RLIMIT_DATA``, never by the address space.

Where the cgroup comes from, the first place that works (:func:`sites`, tried in order by
:mod:`dsh.core.process` with one trial run each, once per process):

1. **cgroup v2**, a sibling of dsh's own cgroup: its parent must have ``pids``/``memory``
   in ``cgroup.subtree_control`` and be writable (root on a host; a delegated subtree);
2. **cgroup v1** (hybrid hosts), beneath dsh's own cgroup in the ``pids`` and ``memory``
   hierarchies, where they are writable (root);
3. **systemd**: ``systemd-run --user --scope -p TasksMax= -p MemoryMax=`` (an ordinary
   user on a systemd machine);
4. none: rlimits alone.

Everything is applied exec-safely, as argv in front of the command, never in a
``preexec_fn`` (which can deadlock a threaded parent between fork and exec): joining the
cgroup is one ``/bin/sh`` line that writes its own pid into ``cgroup.procs`` and ``exec``s
the rest; rlimits are util-linux ``prlimit``, which sets them on itself and ``exec``s.
Neither changes the pid, so the command's process group is still the one dsh started.
The one exception is a command confined by the sandbox's Landlock rung, which is forked
with a ``preexec_fn`` anyway: it joins its cgroup there, before it is confined
(:mod:`dsh.core.confinement`), so no ``cgroup.procs`` is ever writable to it.

The limits guard against accidents and runaway commands. An unsandboxed command run as
root could lift them (raise its hard rlimits, move itself out of the cgroup); inside the
bubblewrap sandbox, with capabilities dropped and ``/sys`` read-only, or on the Landlock
rung (capabilities dropped, ``/sys`` granted read-only), it cannot.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from dsh.core.errors import ConfigError

_LINUX = sys.platform.startswith("linux")
"""cgroups and ``/proc`` are Linux's: every other platform has rlimits at most."""

MB = 1024 * 1024

SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "default": {},
    "description": "Resource limits for each command (0: none); see docs/contracts.md.",
    "properties": {
        "memory_mb": {"type": ["integer", "null"], "minimum": 0, "default": None,
                      "description": "Memory of the whole command in MiB (null: 3/4 of "
                                     "this machine's memory)."},
        "processes": {"type": "integer", "minimum": 0, "default": 4096,
                      "description": "Processes and threads of the command."},
        "file_size_mb": {"type": "integer", "minimum": 0, "default": 16384,
                         "description": "Largest file a command may write, in MiB."},
        "cpu_seconds": {"type": "integer", "minimum": 0, "default": 3600,
                        "description": "CPU time of each process, in seconds."},
        "cgroup": {"type": "boolean", "default": True,
                   "description": "Put each command in a cgroup of its own where dsh can "
                                  "make one (false: rlimits only)."},
    },
    "additionalProperties": False,
}
"""The ``limits`` key of the shell row's config schema."""


class Limits(NamedTuple):
    """One shell row's resource limits (see the module docstring); ``0`` means none."""

    memory_mb: int | None = None
    processes: int = 4096
    file_size_mb: int = 16384
    cpu_seconds: int = 3600
    cgroup: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, *,
                    row_id: str = "shell") -> Limits:
        """The limits of a ``limits`` config; a bad value is a ConfigError naming it."""
        config = dict(config or {})
        where = f"row '{row_id}' config.limits"
        unknown = sorted(set(config) - set(cls._fields))
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown key")
        for key in ("memory_mb", "processes", "file_size_mb", "cpu_seconds"):
            value = config.get(key, cls._field_defaults[key])
            if value is None and key == "memory_mb":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{where}.{key}: expected a whole number >= 0")
        if not isinstance(config.get("cgroup", True), bool):
            raise ConfigError(f"{where}.cgroup: expected true or false")
        return cls(**config)

    def memory_bytes(self) -> int:
        """The memory bound in bytes (0: none), the default worked out for this machine."""
        if self.memory_mb is None:
            return physical_memory() * 3 // 4
        return self.memory_mb * MB

    def rlimits(self, *, cgroup_memory: bool, cgroup_pids: bool) -> dict[str, int]:
        """``prlimit`` option name -> value for what no cgroup controller bounds."""
        found = {"fsize": self.file_size_mb * MB, "cpu": self.cpu_seconds}
        if not cgroup_memory:
            found["data"] = self.memory_bytes()
        if not cgroup_pids and _uid() != 0:  # root is exempt from RLIMIT_NPROC
            found["nproc"] = self.processes
        return {name: value for name, value in found.items() if value > 0}

    def describe(self) -> str:
        """The values in words, for ``dsh doctor``."""
        def size(value: int) -> str:
            return "none" if value == 0 else f"{value // MB} MiB"

        return (f"memory {size(self.memory_bytes())}, processes {self.processes or 'none'}, "
                f"file size {size(self.file_size_mb * MB)}, cpu "
                f"{f'{self.cpu_seconds} s' if self.cpu_seconds else 'none'}")


class Site(NamedTuple):
    """A place where per-command cgroups can be made: ``kind`` and its parent folders.

    ``kind`` is ``v2`` (one folder), ``v1`` (one folder per hierarchy, ``pids`` first) or
    ``systemd`` (no folder: ``systemd-run`` makes a scope). ``controllers`` are those the
    site bounds (``pids``, ``memory``).
    """

    kind: str
    parents: tuple[str, ...]
    controllers: frozenset[str]

    def describe(self) -> str:
        """How the site bounds a command, in a few words."""
        names = "/".join(sorted(self.controllers))
        if self.kind == "systemd":
            return f"a systemd user scope ({names})"
        return f"a cgroup {self.kind} of its own ({names})"


class Cgroup:
    """One command's cgroup: a folder per hierarchy; removed once the command is gone."""

    __slots__ = ("dirs", "kind")

    def __init__(self, kind: str, dirs: tuple[str, ...]) -> None:
        self.kind = kind
        self.dirs = dirs

    def members(self) -> list[int]:
        """Every process still in the cgroup (any hierarchy)."""
        return processes_in(self.dirs)

    def kill_switch(self) -> bool:
        """Kill every member at once through ``cgroup.kill`` (v2, Linux 5.14+); False
        when there is none, and the caller signals :meth:`members` one by one."""
        if self.kind != "v2":
            return False
        try:
            with open(os.path.join(self.dirs[0], "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            return False
        return True

    def remove(self) -> bool:
        """Remove the folders (they must be empty); False when one is still busy."""
        done = True
        for folder in self.dirs:
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                continue
            except OSError:
                done = False
        return done


class Plan(NamedTuple):
    """What a limited command gets: ``prefix`` argv in front of it, and its cgroup."""

    prefix: tuple[str, ...]
    cgroup: Cgroup | None


_names = itertools.count(1)
_swept: set[str] = set()
_NAME = re.compile(r"^dsh-(\d+)(?:\.\d+)?-\d+$")
"""A cgroup folder of dsh (a runtime names it ``dsh-<pid>.<start>-<n>``)."""


def sites(limits: Limits) -> list[Site]:
    """Where cgroups could be made here, best first (nothing is created; Linux only).

    Empty when ``limits.cgroup`` is off, nothing needs a controller, or this is not Linux.
    """
    wanted = set()
    if limits.processes:
        wanted.add("pids")
    if limits.memory_bytes():
        wanted.add("memory")
    if not limits.cgroup or not wanted or not _LINUX:
        return []
    own = own_cgroups()
    mounts = cgroup_mounts()
    found: list[Site] = []
    for fstype, point, root, _options in mounts:
        if fstype == "cgroup2" and "" in own:
            controllers = _read_words(os.path.join(point, "cgroup.controllers"))
            folder = beneath(point, root, own[""])
            if folder is None or not wanted & controllers:
                continue
            parent = folder if os.path.normpath(folder) == os.path.normpath(point) else \
                os.path.dirname(folder)
            delegated = _read_words(os.path.join(parent, "cgroup.subtree_control"))
            use = wanted & delegated
            if use and os.access(parent, os.W_OK):
                found.append(Site("v2", (parent,), frozenset(use)))
    v1: dict[str, str] = {}
    for fstype, point, root, options in mounts:
        if fstype != "cgroup":
            continue
        for controller in wanted & set(options):
            if controller in own and controller not in v1:
                folder = beneath(point, root, own[controller])
                if folder is not None and os.access(folder, os.W_OK):
                    v1[controller] = folder
    if v1:
        order = sorted(v1, key=lambda c: c != "pids")
        found.append(Site("v1", tuple(v1[c] for c in order), frozenset(order)))
    if shutil.which("systemd-run") and _uid() != 0 and os.environ.get("XDG_RUNTIME_DIR"):
        found.append(Site("systemd", (), frozenset(wanted)))
    return found


def plan(limits: Limits, site: Site | None, *, join: tuple[str, ...] = (),
         name: str | None = None, wrapper: bool = True) -> Plan:
    """Make the command's cgroup at ``site`` (None: rlimits only) and its argv prefix;
    ``join`` are more cgroup folders the command joins in the same step, ``name`` the
    cgroup's folder name (a runtime names it as its containers,
    :mod:`dsh.core.containers`, so a later start finds it by name). ``wrapper`` False
    leaves the joining to the caller (a confined command joins in its child before it
    is confined: :mod:`dsh.core.confinement`), so the prefix has no ``/bin/sh`` wrapper.

    Raises OSError when the cgroup cannot be made or its limits written (whatever was
    made is removed again).
    """
    prefix: list[str] = []
    cgroup: Cgroup | None = None
    controllers = site.controllers if site is not None else frozenset()
    if site is not None and site.kind == "systemd":
        prefix += [shutil.which("systemd-run") or "systemd-run", "--user", "--scope",
                   "--quiet", "--collect"]
        if "pids" in controllers:
            prefix += ["-p", f"TasksMax={limits.processes}"]
        if "memory" in controllers:
            prefix += ["-p", f"MemoryMax={limits.memory_bytes()}", "-p", "MemorySwapMax=0"]
        prefix.append("--")
    elif site is not None:
        cgroup = _make(site, limits, name)
    if wrapper:
        prefix += join_prefix((*(cgroup.dirs if cgroup is not None else ()), *join))
    rlimits = limits.rlimits(cgroup_memory="memory" in controllers,
                             cgroup_pids="pids" in controllers)
    prlimit = shutil.which("prlimit") if rlimits else None
    if prlimit:
        prefix += [prlimit, *(f"--{name}={_soft(name, value)}:{value}"
                              for name, value in sorted(rlimits.items())), "--"]
    return Plan(tuple(prefix), cgroup)


def join_prefix(folders: tuple[str, ...]) -> list[str]:
    """The argv in front of a command that moves it into each cgroup of ``folders`` (its
    own pid, written by a ``/bin/sh`` that then ``exec``s the command: exec-safe, and the
    pid stays); empty for none."""
    if not folders:
        return []
    joins = "".join(f'echo $$ >"${n}"/cgroup.procs&&' for n in range(1, len(folders) + 1))
    return ["/bin/sh", "-c", f'{joins}shift {len(folders)}&&exec "$@"', "dsh-cgroup",
            *folders]


def rlimits_available() -> bool:
    """Whether rlimits can be applied here (util-linux ``prlimit`` is on PATH)."""
    return shutil.which("prlimit") is not None


def physical_memory() -> int:
    """This machine's memory in bytes (0 when it cannot be told)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def _soft(name: str, value: int) -> int:
    """The soft limit: the hard one, except CPU, whose soft limit sends SIGXCPU (a
    catchable warning) a few seconds before the hard one's SIGKILL."""
    return max(value - 5, 1) if name == "cpu" else value


def _make(site: Site, limits: Limits, name: str | None = None) -> Cgroup:
    """Create one folder per hierarchy (``name``, else ``dsh-<pid>-<n>``) and write the
    limits into each."""
    name = name or f"dsh-{os.getpid()}-{next(_names)}"
    dirs: list[str] = []
    cgroup = Cgroup(site.kind, ())
    try:
        for parent in site.parents:
            _sweep(parent)
            folder = os.path.join(parent, name)
            os.mkdir(folder)
            dirs.append(folder)
            cgroup.dirs = tuple(dirs)
            for file, value in _limit_files(site, folder, limits):
                with open(os.path.join(folder, file), "w") as f:
                    f.write(value)
    except OSError:
        cgroup.remove()
        raise
    return cgroup


def _limit_files(site: Site, folder: str, limits: Limits) -> list[tuple[str, str]]:
    """The (file, value) pairs that bound ``folder``, in the order they must be written."""
    files: list[tuple[str, str]] = []
    present = set(os.listdir(folder))
    memory = str(limits.memory_bytes())
    if site.kind == "v2":
        if "pids" in site.controllers:
            files.append(("pids.max", str(limits.processes)))
        if "memory" in site.controllers:
            files.append(("memory.max", memory))
            if "memory.swap.max" in present:
                files.append(("memory.swap.max", "0"))
        return files
    if "pids.max" in present:
        files.append(("pids.max", str(limits.processes)))
    if "memory.limit_in_bytes" in present:
        files.append(("memory.limit_in_bytes", memory))
        if "memory.memsw.limit_in_bytes" in present:  # after the plain limit, never below
            files.append(("memory.memsw.limit_in_bytes", memory))
    return files


def _sweep(parent: str) -> None:
    """Remove empty cgroups left by dsh processes that died (once per parent folder)."""
    if not _LINUX or parent in _swept:
        return
    _swept.add(parent)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        match = _NAME.match(name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                continue


def own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and the v2 one under ``""``."""
    found: dict[str, str] = {}
    if not _LINUX:
        return found
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            found[""] = path
        for controller in controllers.split(","):
            if controller:
                found[controller] = path
    return found


def cgroup_mounts() -> list[tuple[str, str, str, list[str]]]:
    """``(fstype, mount point, root within the hierarchy, options)`` of cgroup mounts."""
    found: list[tuple[str, str, str, list[str]]] = []
    if not _LINUX:
        return found
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        options = rest[2].split(",")
        found.append((rest[0], _unescape(fields[4]), _unescape(fields[3]), options))
    return found


def beneath(point: str, root: str, own: str) -> str | None:
    """The folder of cgroup ``own`` in a hierarchy mounted at ``point`` from ``root``."""
    root = root.rstrip("/")
    if own != root and not own.startswith(root + "/"):
        return None
    return os.path.join(point, own[len(root):].lstrip("/"))


def _read_words(path: str) -> set[str]:
    try:
        with open(path) as f:
            return set(f.read().split())
    except OSError:
        return set()


def _unescape(field: str) -> str:
    """A mountinfo path field (spaces and the like are octal escapes there)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1


def processes_in(folders: Iterable[str]) -> list[int]:
    """Every process the cgroup folders list (``cgroup.procs``), sorted; a folder that is
    gone or unreadable lists none."""
    found: set[int] = set()
    for folder in folders:
        try:
            with open(os.path.join(folder, "cgroup.procs")) as f:
                found.update(int(pid) for pid in f.read().split())
        except (OSError, ValueError):
            continue
    return sorted(found)
