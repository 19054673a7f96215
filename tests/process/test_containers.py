"""``dsh.core.containers``: reading ``/proc``, the marker, the record, on real processes
and real files (the end-to-end cases are ``tests/reliability/test_orphans.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh.core import containers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_stat_reads_a_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    odd = tmp_path / "a b) (c"
    odd.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(odd), "30"], start_new_session=True)
    try:
        found = containers.stat(child.pid)
        assert found is not None
        assert (found.ppid, found.pgrp, found.session) == (os.getpid(), child.pid, child.pid)
        assert found.state in "RSD" and found.start > 0
        assert containers.alive(child.pid, found.start)
        assert not containers.alive(child.pid, found.start + 1)  # another process's time
        assert child.pid in containers.children(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert containers.stat(child.pid) is None


def test_the_marker_is_read_from_the_environment_and_passed_down() -> None:
    value = containers.marker_value("1.2/3 4.5/6", "7.8/9")
    assert value == "1.2/3 4.5/6 7.8/9"
    deep = containers.marker_value(" ".join(f"{n}.0/1" for n in range(20)), "last/1")
    assert deep.split()[-1] == "last/1" and len(deep.split()) == 8
    child = subprocess.Popen(["sleep", "30"], env={"A": "1", containers.MARKER: value})
    try:
        # Popen returns once exec began; the new environment is readable a moment later.
        deadline = time.monotonic() + 10
        while not containers.markers(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert containers.markers(child.pid) == ["1.2/3", "4.5/6", "7.8/9"]
    finally:
        child.kill()
        child.wait()
    assert containers.markers(os.getpid()) == [] or containers.MARKER in os.environ


def test_a_record_round_trips_and_aims_only_at_its_own_cgroups(tmp_path: Path) -> None:
    """A record names the folders its runtime's cgroups are in; a sweep takes from them
    only the cgroups named after that runtime (a forged or damaged record naming ``/``
    or another runtime's folder aims at nothing)."""
    me = containers.Identity(12, 34, containers.boot_id())
    first, second = tmp_path / "a", tmp_path / "b"
    ours = [first / "dsh-12.34-1", second / "dsh-12.34-7"]
    others = [first / "dsh-13.34-1", first / "dsh-12.345-1", first / "dsh-12-2",
              second / "not-dsh", second / "dsh-12.34-x"]
    for folder in (*ours, *others):
        folder.mkdir(parents=True)
    record = containers.Record(me, (str(first), str(second), "/"), ((5, 6),))
    path = containers.record_path(tmp_path / "home", me)
    containers.write_record(path, record)
    assert containers.Record.from_json(path.read_text()) == record
    assert sorted(box.folder for box in record.containers()) == [str(p) for p in ours]
    assert containers.Record.from_json("{not json") is None
    assert containers.Record.from_json('{"pid": "x"}') is None


def test_dead_records_are_those_whose_runtime_is_gone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    live = containers.identity()
    gone = subprocess.Popen(["true"])
    start = containers.start_time(gone.pid) or 0
    gone.wait()
    dead = containers.Identity(gone.pid, start, live.boot)
    earlier_boot = containers.Identity(1, 1, "another-boot")
    for who in (live, dead, earlier_boot):
        containers.write_record(containers.record_path(home, who), containers.Record(
            who, ("/x",), ((1, 1),)))
    (home / containers.RECORDS / "junk.json").write_text("not a record")
    found = {path.name: record for path, record in containers.dead_records(home)}
    assert containers.record_path(home, live).name not in found
    assert found[containers.record_path(home, dead).name].children == ((1, 1),)
    # an earlier boot's record names nothing that can still run: it is only removed
    earlier = found[containers.record_path(home, earlier_boot).name]
    assert earlier is not None and earlier.parents == () and earlier.children == ()
    assert found["junk.json"] is None
