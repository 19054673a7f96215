"""The launch cache (:mod:`dsh.config.launchcache`) never serves a stale composition.

A warm launch of an unchanged ``startup`` profile takes its composition from
``cache/launch``; every change to what the composition was made from makes the launch
compose again: ``profile.toml``, the profile's and the home's ``patch.yml`` (created,
edited, removed), a ``--patch`` file (edited, or another set of them), a bundle, a
``!path`` tag's target, the composing code. ``!env`` and ``!home`` values are taken fresh
on every launch from the cached rows. Bad input writes no entry; a ``live`` profile
keeps none; a broken entry is a miss, never an error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.config import launchcache, shipped
from dsh.config.prepare import prepare
from dsh.config.resolve import composed, keep, resolve

RunDsh = Callable[..., subprocess.CompletedProcess[str]]


def entries(home: Path) -> list[Path]:
    return sorted(home.joinpath(*launchcache.SUBDIR).glob("*.pickle"))


def dump(run_dsh: RunDsh, *args: str) -> dict[str, Any]:
    done = run_dsh("--profile", *args, "--dump-config", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ids(document: dict[str, Any]) -> list[str]:
    return [row["id"] for row in document["rows"]]


def hit(home: Path, profile: str, patches: list[str] | None = None) -> bool:
    return launchcache.lookup(home, profile, patches or [], Path.cwd()) is not None


def test_a_warm_launch_is_served_and_equal(run_dsh: RunDsh, dsh_home: Path) -> None:
    first = dump(run_dsh, "sdk")
    assert len(entries(dsh_home)) == 1 and hit(dsh_home, "sdk")
    assert dump(run_dsh, "sdk") == first
    assert not hit(dsh_home, "sdk", ["other.yml"])  # another --patch set: another entry


@pytest.mark.parametrize("where", ["profile", "home"])
def test_a_user_layer_created_edited_or_removed_recomposes(
        run_dsh: RunDsh, dsh_home: Path, where: str) -> None:
    dump(run_dsh, "sdk")
    layer = (dsh_home / "profiles" / "sdk" / "patch.yml" if where == "profile"
             else dsh_home / "patch.yml")
    layer.write_text("- insert: [{id: extra-a, name: 'x:y'}]\n", encoding="utf-8")
    assert not hit(dsh_home, "sdk")
    assert "extra-a" in ids(dump(run_dsh, "sdk"))
    layer.write_text("- insert: [{id: extra-b, name: 'x:y'}]\n", encoding="utf-8")
    assert ids(dump(run_dsh, "sdk"))[-1] == "extra-b"
    layer.unlink()
    assert not {"extra-a", "extra-b"} & set(ids(dump(run_dsh, "sdk")))


def test_profile_toml_edited_recomposes(run_dsh: RunDsh, dsh_home: Path) -> None:
    before = dump(run_dsh, "sdk")
    toml = dsh_home / "profiles" / "sdk" / "profile.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace(
        '["dsh-base", "dsh-sdk-app"]', '["dsh-sdk-minimal"]'), encoding="utf-8")
    after = dump(run_dsh, "sdk")
    assert [layer["source"] for layer in after["layers"]] == ["dsh-sdk-minimal"]
    assert after != before


def test_a_patch_file_edited_recomposes(run_dsh: RunDsh, dsh_home: Path) -> None:
    patch = Path.cwd() / "extra.yml"
    patch.write_text("- insert: [{id: first, name: 'x:y'}]\n", encoding="utf-8")
    assert "first" in ids(dump(run_dsh, "sdk", "--patch", "extra.yml"))
    assert hit(dsh_home, "sdk", ["extra.yml"])
    patch.write_text("- insert: [{id: second, name: 'x:y'}]\n", encoding="utf-8")
    assert "second" in ids(dump(run_dsh, "sdk", "--patch", "extra.yml"))


def test_a_path_tag_whose_target_moved_recomposes(run_dsh: RunDsh, dsh_home: Path) -> None:
    work = Path.cwd()
    (work / "one").mkdir()
    (work / "two").mkdir()
    os.symlink(work / "one", work / "here")
    (work / "extra.yml").write_text(
        "- insert: [{id: tagged, name: 'x:y', config: {dir: !path here}}]\n",
        encoding="utf-8")

    def target() -> str:
        document = dump(run_dsh, "sdk", "--patch", "extra.yml")
        row = next(r for r in document["rows"] if r["id"] == "tagged")
        return str(row["config"]["dir"]["!path"])

    assert target() == str(work / "one")
    assert hit(dsh_home, "sdk", ["extra.yml"])
    (work / "here").unlink()
    os.symlink(work / "two", work / "here")
    assert not hit(dsh_home, "sdk", ["extra.yml"])
    assert target() == str(work / "two")


def test_env_and_home_tags_are_resolved_for_each_launch(dsh_home: Path) -> None:
    (Path.cwd() / "extra.yml").write_text(
        "- insert: [{id: tagged, name: 'x:y', config: {who: !env WHO, at: !home inbox}}]\n",
        encoding="utf-8")
    resolved = resolve(dsh_home, "sdk", ["extra.yml"], Path.cwd())
    keep(resolved, composed(resolved))
    kept = launchcache.lookup(dsh_home, "sdk", ["extra.yml"], Path.cwd())
    assert kept is not None

    def config(environ: dict[str, str]) -> dict[str, Any]:
        launch = prepare(kept, dsh_home, Path.cwd(), [], environ, layers=lambda: resolved)
        return next(r for r in launch.rows if r["id"] == "tagged")["config"]

    assert config({"WHO": "ada"}) == {"who": "ada", "at": str(dsh_home / "inbox")}
    assert config({"WHO": "grace"})["who"] == "grace"
    assert config({})["who"] is None
    again = launchcache.lookup(dsh_home, "sdk", ["extra.yml"], Path.cwd())
    assert again is not None and again.rows == kept.rows  # the cached rows stay tagged


def test_a_changed_bundle_or_composing_code_recomposes(
        dsh_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "installed"
    shutil.copytree(shipped.shipped_root(), copy)
    monkeypatch.setattr(shipped, "shipped_root", lambda: copy)
    resolved = resolve(dsh_home, "sdk", [], Path.cwd())
    keep(resolved, composed(resolved))
    assert hit(dsh_home, "sdk")
    bundle = copy / "bundles" / "dsh-sdk-app" / "patch.yml"
    bundle.write_text(bundle.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert not hit(dsh_home, "sdk")
    resolved = resolve(dsh_home, "sdk", [], Path.cwd())
    keep(resolved, composed(resolved))
    assert hit(dsh_home, "sdk")
    monkeypatch.setattr(launchcache, "_code_stamp", lambda: "other code")
    assert not hit(dsh_home, "sdk")


def test_a_bundle_that_is_not_the_shipped_one_is_never_kept(
        dsh_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resolved = resolve(dsh_home, "sdk", [], Path.cwd())
    monkeypatch.setattr(launchcache, "shipped_bundle", lambda name: Path("/elsewhere"))
    keep(resolved, composed(resolved))
    assert entries(dsh_home) == []


def test_a_live_profile_keeps_none_and_bad_input_writes_none(
        run_dsh: RunDsh, dsh_home: Path) -> None:
    dump(run_dsh, "web")
    assert entries(dsh_home) == []
    (Path.cwd() / "bad.yml").write_text("- {id: nope\n", encoding="utf-8")
    done = run_dsh("--profile", "sdk", "--patch", "bad.yml", "--dump-config")
    assert done.returncode == 2 and entries(dsh_home) == []


def test_a_broken_entry_is_a_miss(run_dsh: RunDsh, dsh_home: Path) -> None:
    first = dump(run_dsh, "sdk")
    (entry,) = entries(dsh_home)
    data = entry.read_bytes()
    entry.write_bytes(data[:len(data) // 2])
    assert not hit(dsh_home, "sdk")
    assert dump(run_dsh, "sdk") == first
    assert hit(dsh_home, "sdk")
