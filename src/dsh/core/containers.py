"""Containers: each child of the runtime in a place of its own, emptied when it stops.

Part of process control: :mod:`dsh.core.process` starts, signals and reaps; this module
finds where containers can be made, makes and removes their folders, reads ``/proc`` and
keeps the record a later start sweeps by. It never signals a process.

A command can leave its process group (``setsid``) and its parent (a double fork), so
neither says what it started. On Linux three things do, each where it can:

* **A cgroup of its own** (:class:`Container`), the one complete answer: a process cannot
  leave it (short of root moving itself out), and it survives its runtime, so a later
  start finds it. Made beneath the runtime's own cgroup, wherever that is writable
  (root, or a delegated subtree): on **cgroup v2**, including a v2 hierarchy mounted
  beside v1 controllers (``/sys/fs/cgroup/unified``), emptied at once through
  ``cgroup.kill`` (Linux 5.14+; else frozen, then each member killed); on **cgroup v1**,
  in a hierarchy the resource limits do not use (``freezer`` first: frozen, so nothing
  forks while the members are killed one by one, until none is left). A child whose
  resource limits made it a cgroup of its own (:mod:`dsh.core.limits`) has that one as
  its container: a second would cost a second migration, a few milliseconds. A
  sub-agent's runtime makes its own containers beneath the one it was started in, so
  killing the outer one empties the whole tree.
* **The runtime as child subreaper** (``PR_SET_CHILD_SUBREAPER``): an orphan of any of
  its descendants becomes its child instead of init's, so it is still in the runtime's
  process tree, found through ``/proc/PID/task/TID/children`` and killed when its
  command stops, or at the latest when the runtime ends.
* **A marker in the environment** (:data:`MARKER`, as Jenkins marks a build's
  processes): every child gets ``DSH_CONTAINER=<runtime pid>.<start>/<n>``, after the
  markers of the runtimes above it, and passes it on to whatever it starts. A stop kills
  what carries its word; a later start kills what carries a dead runtime's. A process
  that clears its environment loses it, which only the cgroup survives.

**The record** (:class:`Record`, ``$DSH_HOME/processes/<pid>.<start>.json``, replaced
atomically): the runtime's own pid and start time, the machine's boot, the folders its
containers are made in (each named ``dsh-<pid>.<start>-<n>``, a limits cgroup too) and
its children's pids with their start times. Written at once when a folder is added (the
first child), a moment later, off the start's path, when only the children changed
(each child is tied to the runtime by the kernel anyway: the list is a second net).
A start (and ``dsh doctor``) reads the records of dead runtimes: it empties their
containers, kills every process that carries their marker, and every recorded child
whose pid still has the recorded start time (from ``/proc/PID/stat``), so a pid that an
unrelated process reuses is never killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from dsh.core.limits import beneath, cgroup_mounts, own_cgroups, processes_in

_LINUX = sys.platform.startswith("linux")

MARKER = "DSH_CONTAINER"
"""The environment variable that names the containers a process was started in."""
RECORDS = "processes"
"""The folder of the dsh home that holds each running runtime's record."""
PREFER = ("auto", "cgroup-v2", "cgroup-v1", "subreaper")
"""Values of ``DSH_CONTAINMENT``: which mechanism to use (``auto``: the best that works)."""
_MAX_MARKERS = 8
"""Markers kept from the runtimes above (a deeper nesting keeps the innermost ones)."""
_ENVIRON_CAP = 1 << 20
"""The most of a process's ``/proc/PID/environ`` read when looking for its marker."""
_NAME = re.compile(r"^dsh-(\d+)\.(\d+)-\d+$")


# -- /proc -----------------------------------------------------------------------------------


class Stat(NamedTuple):
    """What ``/proc/PID/stat`` says of a process that containment needs."""

    state: str
    """``R``, ``S``, ... ``Z`` (a zombie: exited, not yet reaped)."""
    ppid: int
    pgrp: int
    session: int
    start: int
    """Clock ticks after boot: with the pid, the identity of a process within a boot."""


def stat(pid: int) -> Stat | None:
    """``pid``'s stat, or None when there is no such process (or no ``/proc``)."""
    if not _LINUX:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # the name may hold spaces and ")"
    try:
        return Stat(fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]),
                    int(fields[19]))
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot); None when it is gone."""
    found = stat(pid)
    return None if found is None else found.start


def alive(pid: int, start: int) -> bool:
    """Whether the process that started at ``start`` still runs as ``pid`` (a zombie or a
    reuse of the pid does not)."""
    found = stat(pid)
    return found is not None and found.start == start and found.state != "Z"


def boot_id() -> str:
    """This boot's id (a record from an earlier boot names no living process)."""
    if not _LINUX:
        return ""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a thread's fork is its own child)."""
    if not _LINUX:
        return []
    tasks = f"/proc/{pid}/task"
    try:
        tids = os.listdir(tasks)
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"{tasks}/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
        except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: scan them all
            return [p for p in all_pids() if (s := stat(p)) is not None and s.ppid == pid]
        except (OSError, ValueError):
            continue
    return found


def descendants(roots: Iterable[int], limit: int = 100_000) -> list[int]:
    """Every process below ``roots`` (not the roots themselves), breadth first, at most
    ``limit`` of them (a fork bomb must not keep the walk going for ever)."""
    seen: set[int] = set()
    order: list[int] = []
    queue = list(roots)
    while queue and len(order) < limit:
        for pid in children(queue.pop()):
            if pid not in seen:
                seen.add(pid)
                order.append(pid)
                queue.append(pid)
    return order[:limit]


def all_pids() -> list[int]:
    """Every process this one can see."""
    if not _LINUX:
        return []
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def markers(pid: int) -> list[str]:
    """The words of ``pid``'s :data:`MARKER` (empty: none, or its environment is not
    readable, as a non-dumpable process's is not to other users than root)."""
    if not _LINUX:
        return []
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(_ENVIRON_CAP)
    except OSError:
        return []
    key = MARKER.encode() + b"="
    at = data.find(b"\0" + key)
    if at >= 0:
        at += 1
    elif data.startswith(key):
        at = 0
    else:
        return []
    end = data.find(b"\0", at)
    value = data[at + len(key):end if end >= 0 else len(data)]
    return value.decode("ascii", "replace").split()


def ancestors(pid: int) -> set[int]:
    """``pid`` and the chain of its parents (a sweep never kills the process doing it,
    nor what started it)."""
    found = {pid}
    while (parent := stat(pid)) is not None and parent.ppid > 1 and parent.ppid not in found:
        pid = parent.ppid
        found.add(pid)
    return found


# -- identity and markers --------------------------------------------------------------------


class Identity(NamedTuple):
    """One runtime: its pid and start time (unique within a boot), and the boot."""

    pid: int
    start: int
    boot: str

    @property
    def token(self) -> str:
        """The first half of its children's marker words (``<pid>.<start>``)."""
        return f"{self.pid}.{self.start}"


def identity() -> Identity:
    """This process's identity."""
    pid = os.getpid()
    return Identity(pid, start_time(pid) or 0, boot_id())


def marker_value(inherited: str, word: str) -> str:
    """A child's :data:`MARKER`: the markers this runtime was started with, then ``word``."""
    words = [*inherited.split()[-(_MAX_MARKERS - 1):], word]
    return " ".join(words)


# -- where containers can be made -----------------------------------------------------------


class Site(NamedTuple):
    """A folder where a child's cgroup can be made: this process's own cgroup in one
    hierarchy. ``kind`` is ``v2`` or ``v1``; ``beside`` (v2) says v1 controllers are
    mounted too; ``freezer`` (v1) that the hierarchy can freeze its members."""

    kind: str
    parent: str
    beside: bool = False
    freezer: bool = False

    def describe(self) -> str:
        """The mechanism in a few words, without the folder (doctor output has no paths)."""
        if self.kind == "v2":
            where = " (a v2 hierarchy mounted beside v1 controllers)" if self.beside else ""
            return f"cgroup v2{where}: each child in a cgroup of its own, emptied whole"
        how = "frozen, then each member killed" if self.freezer else \
            "each member killed until none is left"
        return f"cgroup v1: each child in a cgroup of its own, emptied ({how})"


def sites(prefer: str = "auto") -> list[Site]:
    """Where containers could be made here, best first (nothing is created; Linux only).

    A v1 hierarchy holding the ``pids`` or ``memory`` controller is left to the resource
    limits (:mod:`dsh.core.limits`), whose own cgroup a command joins there: one process
    is in one cgroup of each hierarchy.
    """
    if not _LINUX or prefer == "subreaper":
        return []
    own = own_cgroups()
    mounts = cgroup_mounts()
    found: list[Site] = []
    beside = any(fstype == "cgroup" for fstype, *_ in mounts)
    if prefer in ("auto", "cgroup-v2") and "" in own:
        for fstype, point, root, _options in mounts:
            folder = beneath(point, root, own[""]) if fstype == "cgroup2" else None
            if folder is not None and _writable(folder):
                found.append(Site("v2", folder, beside=beside))
                break
    if prefer in ("auto", "cgroup-v1"):
        v1: list[Site] = []
        for fstype, point, root, options in mounts:
            names = [o for o in options if o in own]
            if fstype != "cgroup" or not names or {"pids", "memory"} & set(names):
                continue
            folder = beneath(point, root, own[names[0]])
            if folder is not None and _writable(folder):
                v1.append(Site("v1", folder, freezer="freezer" in names))
        found += sorted(v1, key=lambda s: not s.freezer)[:1]
    return found


def _writable(folder: str) -> bool:
    return os.access(folder, os.W_OK) and os.access(os.path.join(folder, "cgroup.procs"),
                                                    os.W_OK)


class Container:
    """One child's cgroup: a folder at a :class:`Site`, removed once it is empty."""

    __slots__ = ("folder", "freezer", "kind")

    def __init__(self, kind: str, folder: str, freezer: bool = False) -> None:
        self.kind = kind
        self.folder = folder
        self.freezer = freezer

    @classmethod
    def at(cls, folder: str) -> Container | None:
        """The container a record names, its kind read from its files; None when gone."""
        try:
            names = set(os.listdir(folder))
        except OSError:
            return None
        if "cgroup.kill" in names or "cgroup.freeze" in names or "cgroup.type" in names:
            return cls("v2", folder)
        return cls("v1", folder, "freezer.state" in names)

    def members(self) -> list[int]:
        """Every process in it, and in the containers a runtime inside made beneath."""
        return processes_in(self._folders())

    def kill_switch(self) -> bool:
        """Kill every member at once, beneath too (v2 ``cgroup.kill``, Linux 5.14+); False
        when there is none, and the caller kills :meth:`members` one by one."""
        return self.kind == "v2" and _write(os.path.join(self.folder, "cgroup.kill"), "1")

    def freeze(self, frozen: bool) -> bool:
        """Freeze (or thaw) every member, so nothing forks while they are killed; False
        when this hierarchy cannot."""
        if self.kind == "v2":
            return _write(os.path.join(self.folder, "cgroup.freeze"), "1" if frozen else "0")
        return self.freezer and _write(os.path.join(self.folder, "freezer.state"),
                                       "FROZEN" if frozen else "THAWED")

    def remove(self) -> bool:
        """Remove the folder, the ones beneath first; False while one is still busy."""
        done = True
        for folder in reversed(self._folders()):
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                continue
            except OSError:
                done = False
        return done

    def _folders(self) -> list[str]:
        """The folder and every folder beneath it, parents first."""
        found = [self.folder]
        for folder in found:
            with contextlib.suppress(OSError):
                found.extend(entry.path for entry in os.scandir(folder)
                             if entry.is_dir(follow_symlinks=False))
        return found


def name(me: Identity, number: int) -> str:
    """The folder name of runtime ``me``'s cgroup ``number`` (a container or a limits
    cgroup), which says whose it is."""
    return f"dsh-{me.token}-{number}"


def make(site: Site, me: Identity, number: int) -> Container:
    """Runtime ``me``'s container ``number`` at ``site``; OSError when it cannot be made."""
    folder = os.path.join(site.parent, name(me, number))
    os.mkdir(folder)
    return Container(site.kind, folder, site.freezer)


def abandoned(site: Site) -> list[Container]:
    """Containers at ``site`` whose runtime is dead (found by their names, whatever home
    that runtime used)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(site.parent):
            match = _NAME.match(entry.name)
            if match and not alive(int(match.group(1)), int(match.group(2))):
                found.append(Container(site.kind, entry.path, site.freezer))
    return found


def _write(path: str, value: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError:
        return False
    return True


# -- the record ------------------------------------------------------------------------------


class Record(NamedTuple):
    """What one runtime has running (see the module docstring)."""

    runtime: Identity
    parents: tuple[str, ...] = ()
    """The cgroup folders its containers are made in."""
    children: tuple[tuple[int, int], ...] = ()
    """``(pid, start time)`` of each child it started and has not yet reaped."""

    def to_json(self) -> str:
        """The file's text."""
        me = self.runtime
        return json.dumps({"version": 1, "boot": me.boot, "pid": me.pid, "start": me.start,
                           "parents": list(self.parents),
                           "children": [list(c) for c in self.children]}, indent=1)

    def containers(self) -> list[Container]:
        """Its containers that still exist: the folders in its parents named after it
        (``dsh-<pid>.<start>-<n>``), so a damaged or forged record cannot aim a sweep at
        any other cgroup."""
        found = []
        for parent in self.parents:
            with contextlib.suppress(OSError):
                for entry in os.scandir(parent):
                    match = _NAME.match(entry.name)
                    if match and (int(match.group(1)), int(match.group(2))) == \
                            self.runtime[:2] and (box := Container.at(entry.path)):
                        found.append(box)
        return found

    @classmethod
    def from_json(cls, text: str) -> Record | None:
        """The record in ``text``; None when it is not one."""
        try:
            data = json.loads(text)
            runtime = Identity(int(data["pid"]), int(data["start"]), str(data["boot"]))
            parents = tuple(str(c) for c in data.get("parents", ()))
            kids = tuple((int(p), int(s)) for p, s in data.get("children", ()))
        except (ValueError, TypeError, KeyError):
            return None
        return cls(runtime, parents, kids)


def record_path(home: str | os.PathLike[str], me: Identity) -> Path:
    """Where runtime ``me`` keeps its record in ``home``."""
    return Path(home) / RECORDS / f"{me.pid}.{me.start}.json"


def write_record(path: Path, record: Record) -> None:
    """Replace the record at ``path`` whole (its folder is made, private, when missing)."""
    from dsh.core.atomicfile import replaced  # tempfile: only once a child starts

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with replaced(path, prefix=".record-", suffix=".tmp", text=True) as out:
        out.write(record.to_json())


def dead_records(home: str | os.PathLike[str]) -> Iterator[tuple[Path, Record | None]]:
    """Each record in ``home`` whose runtime is gone (None: a file that is not a record)."""
    folder = Path(home) / RECORDS
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    boot = boot_id()
    for entry in entries:
        if not entry.name.endswith(".json"):
            continue
        try:
            record = Record.from_json(Path(entry.path).read_text(encoding="utf-8"))
        except OSError:
            continue
        if record is None:
            yield Path(entry.path), None
            continue
        runtime = record.runtime
        if runtime.boot == boot and alive(runtime.pid, runtime.start):
            continue
        yield Path(entry.path), record if runtime.boot == boot else record._replace(
            parents=(), children=())  # an earlier boot's processes are gone already


def leftovers(record: Record, exclude: set[int]) -> dict[int, int]:
    """``pid -> start time`` of what a dead runtime left: its recorded children still
    running as themselves, every process carrying its marker, and all below them (the
    members of its cgroups are the caller's: :class:`Container`)."""
    found: dict[int, int] = {}
    for pid, start in record.children:
        if alive(pid, start):
            found[pid] = start
    prefix = record.runtime.token + "/"
    for pid in all_pids():
        if pid not in exclude and any(w.startswith(prefix) for w in markers(pid)):
            found.setdefault(pid, start_time(pid) or 0)
    for pid in descendants(list(found)):
        if pid not in exclude and (s := stat(pid)) is not None and s.state != "Z":
            found.setdefault(pid, s.start)
    return {pid: start for pid, start in found.items() if pid not in exclude}
