"""The parsed-layer cache: a hit equals a parse, and anything doubtful parses again."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dsh.config.layercache import MAX_ENTRIES, LayerCache
from dsh.config.patchfile import parse_layer
from dsh.config.profiles import Profile

RunDsh = Callable[..., subprocess.CompletedProcess[str]]

PATCH = """\
- id: agent
  config:
    model: m1
    key: !env DSH_TEST_KEY
- insert:
    - id: extra
      name: tool-echo
      config: {home: !home data}
"""


@pytest.fixture
def patch_file(tmp_path: Path) -> Path:
    path = tmp_path / "cwd" / "p.yml"
    path.write_text(PATCH, encoding="utf-8")
    return path


def entries(home: Path) -> list[Path]:
    folder = home / "cache" / "layers"
    return sorted(folder.glob("*.pickle")) if folder.is_dir() else []


def stored_layer(entry: Path) -> object:
    """The parsed value in an entry: after its header line (format, code stamp, name)."""
    _header, _, stored = entry.read_bytes().partition(b"\n")
    _stamp_and_name, _, stored = stored.partition(b"\n")
    _text, layer, _checks = pickle.loads(stored)
    return layer


def parsed(path: Path, kind: str = "patch") -> object:
    return parse_layer(path.read_text(encoding="utf-8"), path=path, kind=kind, source=str(path))


def test_a_saved_layer_is_read_back_equal(dsh_home: Path, patch_file: Path) -> None:
    first = LayerCache(dsh_home).load(patch_file, kind="patch")
    assert entries(dsh_home) == []  # nothing is written before save()
    cache = LayerCache(dsh_home)
    cache.load(patch_file, kind="patch")
    cache.save()
    [entry] = entries(dsh_home)
    assert stored_layer(entry) == first == parsed(patch_file)
    inode = entry.stat().st_ino
    again = LayerCache(dsh_home)
    assert again.load(patch_file, kind="patch") == first
    again.save()
    assert entries(dsh_home) == [entry]
    assert entry.stat().st_ino == inode  # a hit rewrites nothing (a save replaces the inode)
    assert oct((dsh_home / "cache" / "layers").stat().st_mode & 0o777) == "0o700"


def test_an_edited_file_misses(dsh_home: Path, patch_file: Path) -> None:
    cache = LayerCache(dsh_home)
    cache.load(patch_file, kind="patch")
    cache.save()
    patch_file.write_text(PATCH.replace("m1", "m2"), encoding="utf-8")
    cache = LayerCache(dsh_home)
    layer = cache.load(patch_file, kind="patch")
    assert layer == parsed(patch_file)
    assert layer.operations[0].assign["config"]["model"] == "m2"
    cache.save()
    [entry] = entries(dsh_home)  # the file's entry was replaced, not added to
    assert stored_layer(entry) == layer


def test_the_same_text_elsewhere_keeps_its_own_provenance(
        dsh_home: Path, patch_file: Path) -> None:
    cache = LayerCache(dsh_home)
    cache.load(patch_file, kind="patch")
    cache.save()
    twin = patch_file.with_name("twin.yml")
    twin.write_text(PATCH, encoding="utf-8")
    layer = LayerCache(dsh_home).load(twin, kind="patch")
    assert layer.path == twin and layer.source == str(twin)
    home_layer = LayerCache(dsh_home).load(twin, kind="home")
    assert home_layer.kind == "home"


def test_a_path_tag_is_cached_while_it_resolves_the_same(
        dsh_home: Path, tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    link = tmp_path / "cwd" / "data"
    link.symlink_to(tmp_path / "one")
    path = tmp_path / "cwd" / "p.yml"
    path.write_text("- id: agent\n  config: {script: !path data/script.yml}\n",
                    encoding="utf-8")
    cache = LayerCache(dsh_home)
    first = cache.load(path, kind="patch")
    cache.save()
    assert len(entries(dsh_home)) == 1
    assert LayerCache(dsh_home).load(path, kind="patch") == first
    ref = first.operations[0].assign["config"]["script"]
    assert ref.path == str(tmp_path / "one" / "script.yml")

    link.unlink()
    link.symlink_to(tmp_path / "two")  # same text, another target: the entry is stale
    moved = LayerCache(dsh_home).load(path, kind="patch")
    assert moved.operations[0].assign["config"]["script"].path == str(
        tmp_path / "two" / "script.yml")
    assert moved == parsed(path)


@pytest.mark.parametrize("garbage", [b"", b"\x80\x05truncated", pickle.dumps({"not": "a layer"})])
def test_an_unreadable_entry_means_a_parse(
        dsh_home: Path, patch_file: Path, garbage: bytes) -> None:
    cache = LayerCache(dsh_home)
    cache.load(patch_file, kind="patch")
    cache.save()
    [entry] = entries(dsh_home)
    entry.write_bytes(garbage)
    cache = LayerCache(dsh_home)
    assert cache.load(patch_file, kind="patch") == parsed(patch_file)
    cache.save()  # the parse repairs the entry
    assert stored_layer(entry) == parsed(patch_file)


class Tripwire:
    """Unpickling one of these leaves a mark: an entry that must not be unpickled."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (_mark, ("unpickled",))


MARKS: list[str] = []


def _mark(what: str) -> str:
    MARKS.append(what)
    return what


def test_an_entry_of_other_code_is_never_unpickled(dsh_home: Path, patch_file: Path) -> None:
    cache = LayerCache(dsh_home)
    cache.load(patch_file, kind="patch")
    cache.save()
    [entry] = entries(dsh_home)
    header, _, rest = entry.read_bytes().partition(b"\n")
    stamp_line, _, _ = rest.partition(b"\n")
    other = stamp_line.replace(b":", b";", 1)  # the same file, parsed by other code
    entry.write_bytes(header + b"\n" + other + b"\n" + pickle.dumps(Tripwire()))
    MARKS.clear()
    assert LayerCache(dsh_home).load(patch_file, kind="patch") == parsed(patch_file)
    assert MARKS == []  # the header did not match: nothing was unpickled


def test_two_parsers_sharing_a_home_keep_an_entry_each(
        dsh_home: Path, patch_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exe and the python carrier parse with different code (their stamps differ):
    each finds its own entry, and neither overwrites the other's."""
    from dsh.config import layercache

    cache = LayerCache(dsh_home)
    cache.load(patch_file, kind="patch")
    cache.save()
    [mine] = entries(dsh_home)
    monkeypatch.setattr(layercache, "_code_stamp", lambda: "0.0.0:frozen")
    other = LayerCache(dsh_home)
    other.load(patch_file, kind="patch")
    other.save()
    assert len(entries(dsh_home)) == 2
    inodes = {e: e.stat().st_ino for e in entries(dsh_home)}
    again = LayerCache(dsh_home)
    again.load(patch_file, kind="patch")
    again.save()  # a hit for the frozen stamp: nothing rewritten
    monkeypatch.undo()
    back = LayerCache(dsh_home)
    back.load(patch_file, kind="patch")
    back.save()
    assert {e: e.stat().st_ino for e in entries(dsh_home)} == inodes
    assert mine in inodes


def test_a_home_that_cannot_hold_a_cache_still_loads(dsh_home: Path, patch_file: Path) -> None:
    (dsh_home / "cache").write_text("a file where the cache folder would go\n")
    cache = LayerCache(dsh_home)
    assert cache.load(patch_file, kind="patch") == parsed(patch_file)
    cache.save()
    assert list(dsh_home.glob("**/.tmp-*")) == []


def test_the_oldest_entries_are_pruned(dsh_home: Path, patch_file: Path) -> None:
    folder = dsh_home / "cache" / "layers"
    folder.mkdir(parents=True)
    for n in range(MAX_ENTRIES):
        stale = folder / f"{n:064x}.pickle"
        stale.write_bytes(b"")
        os.utime(stale, (1_000_000 + n, 1_000_000 + n))
    cache = LayerCache(dsh_home)
    cache.load(patch_file, kind="patch")
    cache.save()
    left = entries(dsh_home)
    assert len(left) == MAX_ENTRIES
    assert folder / f"{0:064x}.pickle" not in left  # the oldest went
    newest = max(left, key=lambda p: p.stat().st_mtime)
    assert stored_layer(newest) == parsed(patch_file)


def test_an_edited_profile_patch_is_read_again(
        run_dsh: RunDsh, dsh_home: Path, write_profile: Callable[..., Path]) -> None:
    folder = write_profile("mine", bundles=["dsh-base"],
                           patch="- id: agent\n  config: {max-steps: 7}\n")
    first = json.loads(run_dsh("--profile", "mine", "--dump-config", "--json").stdout)
    assert entries(dsh_home)
    (folder / "patch.yml").write_text("# moved down a line\n- id: agent\n"
                                      "  config: {max-steps: 9}\n", encoding="utf-8")
    second = json.loads(run_dsh("--profile", "mine", "--dump-config", "--json").stdout)
    [agent] = [row for row in first["rows"] if row["id"] == "agent"]
    [edited] = [row for row in second["rows"] if row["id"] == "agent"]
    assert agent["config"]["max-steps"] == 7
    assert edited["config"]["max-steps"] == 9
    assert agent["provenance"]["config"].endswith("patch.yml:2")
    assert edited["provenance"]["config"].endswith("patch.yml:3")


def test_a_bad_patch_fails_every_time_and_is_not_cached(
        run_dsh: RunDsh, dsh_home: Path, tmp_path: Path) -> None:
    (tmp_path / "cwd" / "bad.yml").write_text("agent: {}\n", encoding="utf-8")
    results = [run_dsh("--profile", "sdk", "--patch", "bad.yml", "--dump-config")
               for _ in range(2)]
    assert [r.returncode for r in results] == [2, 2]
    assert results[0].stderr == results[1].stderr
    assert entries(dsh_home) == []  # not even the bundle layers that parsed first


def test_a_profile_file_is_cached_and_an_edit_is_read_again(
        run_dsh: RunDsh, dsh_home: Path, write_profile: Callable[..., Path]) -> None:
    folder = write_profile("mine", bundles=["dsh-base"], patch_reload="live")
    first = json.loads(run_dsh("--profile", "mine", "--dump-config", "--json").stdout)
    stored = [stored_layer(e) for e in entries(dsh_home)]
    assert any(isinstance(v, Profile) and v.patch_reload == "live" for v in stored)
    (folder / "profile.toml").write_text(
        '[profile]\nbundles = ["dsh-base", "dsh-sdk-app"]\npatch-reload = "startup"\n',
        encoding="utf-8")
    second = json.loads(run_dsh("--profile", "mine", "--dump-config", "--json").stdout)
    assert first["patchReload"] == "live" and second["patchReload"] == "startup"
    assert [layer["source"] for layer in second["layers"]][:2] == ["dsh-base", "dsh-sdk-app"]


def test_a_bad_profile_file_fails_every_time_and_is_not_cached(
        run_dsh: RunDsh, dsh_home: Path, write_profile: Callable[..., Path]) -> None:
    folder = write_profile("mine", bundles=["dsh-base"])
    assert run_dsh("--profile", "mine", "--dump-config").returncode == 0
    before = {e: e.read_bytes() for e in entries(dsh_home)}
    (folder / "profile.toml").write_text('[profile]\nbundles = "dsh-base"\n', encoding="utf-8")
    results = [run_dsh("--profile", "mine", "--dump-config") for _ in range(2)]
    assert [r.returncode for r in results] == [2, 2]
    assert "profile.bundles must be a list" in results[0].stderr
    assert results[0].stderr == results[1].stderr
    assert {e: e.read_bytes() for e in entries(dsh_home)} == before  # nothing stored
