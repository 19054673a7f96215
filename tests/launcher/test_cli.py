"""The real ``dsh`` process: dumps, layer order, profiles, homes, and every bad input.

Each test spawns ``python -m dsh`` against the test's own home and cwd (see the root
conftest) and checks exit code, stdout and stderr as a user would see them.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.config import profiles, shipped

from .test_profiles import install_bundle

OFFLINE = Path(__file__).resolve().parents[2] / "examples" / "offline" / "patch.yml"

RunDsh = Callable[..., subprocess.CompletedProcess[str]]


def dump(run_dsh: RunDsh, *args: str) -> dict[str, Any]:
    """``dsh ARGS --dump-config --json``, which must succeed without warnings."""
    proc = run_dsh(*args, "--dump-config", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return json.loads(proc.stdout)


def all_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of a dump, depth-first, group children included."""
    out = []
    for row in rows:
        out.append(row)
        if row.get("group"):
            out += all_rows(row["config"])
    return out


def bundle_line(source: str) -> str:
    """The text of the shipped bundle line a provenance value ``bundle:N`` points at."""
    name, _, line = source.rpartition(":")
    text = (shipped.bundle_dir(name) / "patch.yml").read_text(encoding="utf-8")
    return text.splitlines()[int(line) - 1]


def assert_full_provenance(row: dict[str, Any]) -> None:
    """Every key the row carries, and every top-level config key, has a provenance."""
    prov = row["provenance"]
    assert prov, row["id"]
    for key in ("name", "disabled", "inject"):
        if key in row:
            assert key in prov, (row["id"], key)
    if "config" in row and not row.get("group"):
        for key in row["config"]:
            assert f"config.{key}" in prov, (row["id"], key)


# -- the composed tree ---------------------------------------------------------------------


def test_sdk_dump_has_provenance_for_every_row(run_dsh: RunDsh) -> None:
    document = dump(run_dsh, "--profile", "sdk")
    assert document["profile"] == "sdk"
    assert document["patchReload"] == "startup"
    assert document["layers"] == [{"kind": "bundle", "source": "dsh-base"},
                                  {"kind": "bundle", "source": "dsh-sdk-app"}]
    assert document["warnings"] == []
    rows = all_rows(document["rows"])
    assert rows
    sources = set()
    for row in rows:
        assert_full_provenance(row)
        for key, where in row["provenance"].items():
            assert re.fullmatch(r"(dsh-base|dsh-sdk-app):[1-9][0-9]*", where), where
            sources.add(where.partition(":")[0])
            # the line named really is where that key is written
            assert key.rpartition(".")[2] in bundle_line(where), (key, where)
    assert sources == {"dsh-base", "dsh-sdk-app"}
    assert len({row["id"] for row in rows}) == len(rows)


def test_sdk_minimal_has_no_row_from_dsh_base(run_dsh: RunDsh) -> None:
    document = dump(run_dsh, "--profile", "sdk-minimal")
    assert document["layers"] == [{"kind": "bundle", "source": "dsh-sdk-minimal"}]
    rows = all_rows(document["rows"])
    assert rows
    for row in rows:
        assert_full_provenance(row)
        for where in row["provenance"].values():
            assert where.startswith("dsh-sdk-minimal:"), (row["id"], where)
    assert "dsh-base" not in json.dumps(document)


def test_shorthand_runs_the_same_profile(run_dsh: RunDsh) -> None:
    assert dump(run_dsh, "web") == dump(run_dsh, "--profile", "web")


def test_text_dump_is_the_same_facts(run_dsh: RunDsh) -> None:
    proc = run_dsh("--profile", "sdk", "--dump-config")
    assert (proc.returncode, proc.stderr) == (0, "")
    lines = proc.stdout.splitlines()
    assert lines[:4] == ["profile sdk (patch-reload: startup)", "layers:",
                         "  bundle: dsh-base", "  bundle: dsh-sdk-app"]
    assert "rows:" in lines
    document = dump(run_dsh, "--profile", "sdk")
    for row in all_rows(document["rows"]):
        assert any(f"- {row['id']}: " in line for line in lines), row["id"]


# Each layer writes config.max_steps at a different line, so the exact line is checked.
LAYER_STEPS = [
    # (what, steps, file text)
    ("bundle", "3", "# a third-party bundle\n- id: agent\n  merge:\n    config:\n"
                    "      max_steps: 3\n"),
    ("profile", "4", "- id: agent\n  merge:\n    config:\n      max_steps: 4\n"),
    ("home", "5", "#\n#\n- id: agent\n  merge:\n    config:\n      max_steps: 5\n"),
    ("patch1", "6", "#\n- id: agent\n  merge:\n    config:\n      max_steps: 6\n"),
    ("patch2", "7", "#\n#\n#\n- id: agent\n  merge:\n    config:\n      max_steps: 7\n"),
]


@pytest.mark.parametrize("depth", range(len(LAYER_STEPS) + 1))
def test_layer_order_last_write_wins_with_exact_provenance(
        run_dsh: RunDsh, write_profile: Callable[..., Path], dsh_home: Path, tmp_path: Path,
        depth: int) -> None:
    """dsh-base, a third-party bundle, profile patch, home patch, two --patch files."""
    layers = LAYER_STEPS[:depth]
    names = [what for what, _, _ in layers]
    texts = {what: text for what, _, text in layers}
    bundles = ["dsh-base", "acme-bundle"] if "bundle" in names else ["dsh-base"]
    folder = write_profile("layered", bundles=bundles, patch=texts.get("profile"))
    if "bundle" in names:
        install_bundle(folder / "plugins", "acme-bundle", "acme_layer_pkg", texts["bundle"])
    if "home" in names:
        (dsh_home / "patch.yml").write_text(texts["home"], encoding="utf-8")
    patch_args = []
    for what in ("patch1", "patch2"):
        if what in names:
            (tmp_path / "cwd" / f"{what}.yml").write_text(texts[what], encoding="utf-8")
            patch_args += ["--patch", f"{what}.yml"]
    document = dump(run_dsh, "--profile", "layered", *patch_args)
    agent = next(row for row in document["rows"] if row["id"] == "agent")
    if depth == 0:
        expected_value, expected_where = 50, f"dsh-base:{base_line('max_steps')}"
    else:
        what, steps, text = layers[-1]
        line = text.splitlines().index(f"      max_steps: {steps}") + 1
        where = {
            "bundle": "acme-bundle",
            "profile": str(folder / "patch.yml"),
            "home": str(dsh_home / "patch.yml"),
            "patch1": str((tmp_path / "cwd" / "patch1.yml").resolve()),
            "patch2": str((tmp_path / "cwd" / "patch2.yml").resolve()),
        }[what]
        expected_value, expected_where = int(steps), f"{where}:{line}"
    assert agent["config"]["max_steps"] == expected_value
    assert agent["provenance"]["config.max_steps"] == expected_where
    assert agent["provenance"]["config.default_route"] == f"dsh-base:{base_line('default_route')}"
    kinds = [layer["kind"] for layer in document["layers"]]
    assert kinds == (["bundle"] * len(bundles) + ["profile"] * ("profile" in names)
                     + ["home"] * ("home" in names)
                     + ["patch"] * sum(w.startswith("patch") for w in names))


def base_line(key: str, row: str = "agent") -> int:
    """The line of ``key:`` within row ``row`` of the shipped dsh-base bundle."""
    lines = (shipped.bundle_dir("dsh-base") / "patch.yml").read_text(encoding="utf-8")
    numbered = list(enumerate(lines.splitlines(), 1))
    start = next(i for i, line in numbered if line.strip() == f"- id: {row}")
    return next(i for i, line in numbered[start:] if line.strip().startswith(f"{key}:"))


def test_assignment_provenance_names_the_value_line(run_dsh: RunDsh, tmp_path: Path) -> None:
    patch = tmp_path / "cwd" / "p.yml"
    patch.write_text("# one\n# two\n- id: agent\n  name: agent-core\n  config:\n"
                     "    max_steps: 9\n", encoding="utf-8")
    document = dump(run_dsh, "--profile", "sdk", "--patch", "p.yml")
    agent = next(row for row in document["rows"] if row["id"] == "agent")
    assert agent["config"] == {"max_steps": 9}
    assert agent["provenance"]["config.max_steps"] == f"{patch}:6"
    assert agent["provenance"]["config"] == f"{patch}:5"
    assert agent["provenance"]["name"] == f"dsh-base:{base_line('name')}"


def test_dump_default_config_shows_only_bundle_layers(
        run_dsh: RunDsh, write_profile: Callable[..., Path], dsh_home: Path,
        tmp_path: Path) -> None:
    sdk = dump(run_dsh, "--profile", "sdk")
    override = "- id: agent\n  disabled: true\n"
    write_profile("mine", bundles=["dsh-base", "dsh-sdk-app"], patch=override)
    (dsh_home / "patch.yml").write_text(override, encoding="utf-8")
    (tmp_path / "cwd" / "p.yml").write_text(override, encoding="utf-8")
    proc = run_dsh("--profile", "mine", "--patch", "p.yml", "--dump-default-config", "--json")
    assert (proc.returncode, proc.stderr) == (0, "")
    default = json.loads(proc.stdout)
    assert [layer["kind"] for layer in default["layers"]] == ["bundle", "bundle"]
    assert "disabled" not in next(row for row in default["rows"] if row["id"] == "agent")
    full = dump(run_dsh, "--profile", "mine", "--patch", "p.yml")
    assert [layer["kind"] for layer in full["layers"]] == [
        "bundle", "bundle", "profile", "home", "patch"]
    assert default["rows"] == sdk["rows"]


def test_tags_dump_as_references(run_dsh: RunDsh, tmp_path: Path) -> None:
    (tmp_path / "cwd" / "p.yml").write_text(
        "- id: policy\n  config:\n    key: !env API_KEY\n    port: !env [PORT, 8080]\n"
        "    db: !home data/sessions.db\n    file: !path files/x.txt\n", encoding="utf-8")
    proc = run_dsh("--profile", "sdk", "--patch", "p.yml", "--dump-config", "--json",
                   env={"API_KEY": "sk-secret-value"})
    assert proc.returncode == 0, proc.stderr
    assert "sk-secret-value" not in proc.stdout
    policy = next(row for row in json.loads(proc.stdout)["rows"] if row["id"] == "policy")
    assert policy["config"] == {
        "key": {"!env": "API_KEY"},
        "port": {"!env": ["PORT", "8080"]},
        "db": {"!home": "data/sessions.db"},
        "file": {"!path": str((tmp_path / "cwd" / "files" / "x.txt").resolve())},
    }


def test_warnings_go_to_stderr_and_the_document(run_dsh: RunDsh, tmp_path: Path) -> None:
    patch = tmp_path / "cwd" / "p.yml"
    patch.write_text("- id: ghost\n  disabled: true\n- id: agent\n  name: other\n"
                     "  disabled: true\n", encoding="utf-8")
    proc = run_dsh("--profile", "sdk", "--patch", "p.yml", "--dump-config", "--json")
    assert proc.returncode == 0
    expected = [f"{patch}:1: unknown row id 'ghost'",
                f"{patch}:3: row 'agent' is 'agent-core', not 'other'; operation skipped"]
    assert proc.stderr.splitlines() == [f"dsh: warning: {w}" for w in expected]
    document = json.loads(proc.stdout)
    assert document["warnings"] == expected
    agent = next(row for row in document["rows"] if row["id"] == "agent")
    assert "disabled" not in agent


def test_disabled_group_and_merge_in_the_dump(run_dsh: RunDsh, tmp_path: Path) -> None:
    (tmp_path / "cwd" / "p.yml").write_text(
        "- id: tools\n  disabled: true\n- id: agent\n  merge:\n    config:\n"
        "      extra: {deep: 1}\n", encoding="utf-8")
    document = dump(run_dsh, "--profile", "sdk", "--patch", "p.yml")
    rows = {row["id"]: row for row in document["rows"]}
    assert rows["tools"]["disabled"] is True
    where = str((tmp_path / "cwd" / "p.yml").resolve())
    assert rows["tools"]["provenance"]["disabled"] == f"{where}:2"
    assert rows["agent"]["config"]["extra"] == {"deep": 1}
    assert rows["agent"]["config"]["max_steps"] == 50
    assert rows["agent"]["provenance"]["config.extra"] == f"{where}:6"
    assert rows["agent"]["provenance"]["config"] == f"{where}:5"
    assert rows["agent"]["provenance"]["config.max_steps"] == f"dsh-base:{base_line('max_steps')}"


def test_dump_flags_take_no_app_arguments(run_dsh: RunDsh, dsh_home: Path) -> None:
    proc = run_dsh("--profile", "sdk", "--dump-config", "extra")
    assert proc.returncode == 2
    assert proc.stderr == "dsh: error: --dump-config takes no application arguments " \
                          "(got 'extra')\n"
    assert list(dsh_home.iterdir()) == []


# -- version, help, schema, profile list ---------------------------------------------------


def test_version_and_help(run_dsh: RunDsh) -> None:
    from dsh import __version__

    proc = run_dsh("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"dsh {__version__}\n", "")
    assert run_dsh("-V").stdout == proc.stdout
    proc = run_dsh("-h")
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: dsh ")
    assert "--dump-config" in proc.stdout


def test_no_profile_is_a_usage_error(run_dsh: RunDsh, dsh_home: Path) -> None:
    proc = run_dsh()
    assert proc.returncode == 2
    assert proc.stderr.endswith("dsh: error: no profile given (try `dsh --profile sdk` or "
                                "`dsh web`)\n")
    assert list(dsh_home.iterdir()) == []


def test_profile_list_json(run_dsh: RunDsh, write_profile: Callable[..., Path],
                           dsh_home: Path) -> None:
    write_profile("mine", bundles=["dsh-base", "dsh-headless"])
    broken = write_profile("broken", bundles=[])
    (broken / "profile.toml").write_text("[profile]\npatch-reload = 1\n", encoding="utf-8")
    proc = run_dsh("profile", "list", "--json")
    assert (proc.returncode, proc.stderr) == (0, "")
    document = json.loads(proc.stdout)
    assert {k: document[k] for k in ("schema_version", "command", "ok", "profile", "error")} == {
        "schema_version": 1, "command": "profile list", "ok": True, "profile": None,
        "error": None}
    rows = document["data"]["profiles"]
    assert [row["id"] for row in rows] == sorted(row["id"] for row in rows)
    by_id = {row["id"]: row for row in rows}
    assert set(by_id) == {"acp", "broken", "chat", "headless", "mine", "sdk", "sdk-minimal",
                          "web"}
    assert by_id["chat"] == {"id": "chat", "bundles": ["dsh-base", "dsh-chat-app"],
                             "patchReload": "live", "shipped": True, "seeded": False}
    assert by_id["mine"] == {"id": "mine", "bundles": ["dsh-base", "dsh-headless"],
                             "patchReload": "live", "shipped": False, "seeded": True}
    assert by_id["web"] == {"id": "web", "bundles": ["dsh-base", "dsh-web-app"],
                            "patchReload": "live", "shipped": True, "seeded": False}
    assert by_id["broken"]["error"].startswith(
        "$DSH_HOME/profiles/broken/profile.toml: profile.patch-reload must be one of")
    assert str(dsh_home) not in proc.stdout
    text = run_dsh("profile", "list")
    assert text.returncode == 0
    assert "sdk-minimal\tstartup\tdsh-sdk-minimal\n" in text.stdout
    assert "broken\tERROR " in text.stdout
    assert sorted(p.name for p in (dsh_home / "profiles").iterdir()) == ["broken", "mine"]


def test_subcommand_usage_errors_exit_2(run_dsh: RunDsh) -> None:
    proc = run_dsh("info", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith("dsh: error: ")
    assert len(proc.stderr.splitlines()) == 1


# -- profiles and the home on disk ---------------------------------------------------------


def mode(path: Path) -> int:
    """The permission bits of ``path``."""
    return stat.S_IMODE(path.stat().st_mode)


def test_home_is_created_private_relative_to_cwd(run_dsh: RunDsh, tmp_path: Path) -> None:
    proc = run_dsh("--home", "fresh-home", "--profile", "sdk", "--dump-config")
    assert proc.returncode == 0, proc.stderr
    home = tmp_path / "cwd" / "fresh-home"
    assert mode(home) == 0o700
    assert mode(home / "profiles") == 0o700
    assert mode(home / "profiles" / "sdk") == 0o700
    assert sorted(p.name for p in (home / "profiles").iterdir()) == ["sdk"]


def test_dsh_home_variable_is_used(run_dsh: RunDsh, tmp_path: Path) -> None:
    other = tmp_path / "other-home"
    proc = run_dsh("--profile", "acp", "--dump-config", env={"DSH_HOME": str(other)})
    assert proc.returncode == 0, proc.stderr
    assert mode(other) == 0o700
    assert (other / "profiles" / "acp" / "profile.toml").is_file()


def test_seeding_never_overwrites_an_edited_profile(run_dsh: RunDsh, dsh_home: Path) -> None:
    dump(run_dsh, "--profile", "sdk")
    toml = dsh_home / "profiles" / "sdk" / "profile.toml"
    edited = '# mine now\n[profile]\nbundles = ["dsh-sdk-minimal"]\npatch-reload = "live"\n'
    toml.write_text(edited, encoding="utf-8")
    document = dump(run_dsh, "--profile", "sdk")
    assert document["patchReload"] == "live"
    assert document["layers"] == [{"kind": "bundle", "source": "dsh-sdk-minimal"}]
    assert toml.read_text(encoding="utf-8") == edited


def test_from_default_profile_creates_a_custom_profile(run_dsh: RunDsh, dsh_home: Path) -> None:
    document = dump(run_dsh, "--profile", "mine", "--from-default-profile", "headless")
    assert document["profile"] == "mine"
    assert document["patchReload"] == "startup"
    assert [layer["source"] for layer in document["layers"]] == ["dsh-base", "dsh-headless"]
    folder = dsh_home / "profiles" / "mine"
    assert mode(folder) == 0o700
    assert (folder / "profile.toml").read_bytes() == (
        shipped.template_dir("headless") / "profile.toml").read_bytes()
    assert dump(run_dsh, "mine") == document


@pytest.mark.parametrize("name", ["mine", "web"])
def test_from_default_profile_refuses_an_existing_name(
        run_dsh: RunDsh, write_profile: Callable[..., Path], dsh_home: Path,
        snapshot_tree: Callable[[Path], Any], name: str) -> None:
    write_profile("mine", bundles=["dsh-base"])
    before = snapshot_tree(dsh_home)
    proc = run_dsh("--profile", name, "--from-default-profile", "sdk", "--dump-config")
    assert proc.returncode == 2
    assert proc.stderr == (f"dsh: error: profile {name!r} already exists; "
                           "choose another name\n")
    assert snapshot_tree(dsh_home) == before


def test_from_default_profile_rolls_back_when_the_launch_fails(
        run_dsh: RunDsh, dsh_home: Path, snapshot_tree: Callable[[Path], Any]) -> None:
    before = snapshot_tree(dsh_home)
    proc = run_dsh("--profile", "mine", "--from-default-profile", "sdk", "--patch",
                   "missing.yml", "--dump-config")
    assert proc.returncode == 2
    assert proc.stderr.startswith("dsh: error: --patch missing.yml: file not found")
    assert snapshot_tree(dsh_home) == before
    proc = run_dsh("--profile", "mine", "--from-default-profile", "nope", "--dump-config")
    assert proc.returncode == 2
    assert proc.stderr.startswith("dsh: error: unknown template 'nope'")
    assert snapshot_tree(dsh_home) == before


# -- bad input: exit 2, one line naming the file, nothing written --------------------------

# A setup writes the bad input into (home, cwd) and returns the argv and extra environment.
Setup = Callable[[Path, Path], tuple[list[str], dict[str, str]]]


def _profile_toml(text: str) -> Setup:
    def setup(home: Path, cwd: Path) -> tuple[list[str], dict[str, str]]:
        folder = home / "profiles" / "bad"
        folder.mkdir(parents=True)
        (folder / "profile.toml").write_text(text, encoding="utf-8")
        return ["--profile", "bad", "--dump-config"], {}
    return setup


def _patch(text: str, where: str = "patch") -> Setup:
    def setup(home: Path, cwd: Path) -> tuple[list[str], dict[str, str]]:
        if where == "patch":
            (cwd / "p.yml").write_text(text, encoding="utf-8")
            return ["--profile", "sdk", "--patch", "p.yml", "--dump-config", "--json"], {}
        target = home / "patch.yml" if where == "home" else home / "profiles" / "sdk" / "patch.yml"
        target.write_text(text, encoding="utf-8")
        return ["--profile", "sdk", "--dump-config"], {}
    return setup


def _env_file(text: str, where: str) -> Setup:
    def setup(home: Path, cwd: Path) -> tuple[list[str], dict[str, str]]:
        ((home if where == "home" else cwd) / ".env").write_text(text, encoding="utf-8")
        return ["--profile", "sdk", "some", "task"], {}
    return setup


def _fixed(*args: str) -> Setup:
    def setup(home: Path, cwd: Path) -> tuple[list[str], dict[str, str]]:
        return list(args), {}
    return setup


def _home_is_file(flag: bool) -> Setup:
    def setup(home: Path, cwd: Path) -> tuple[list[str], dict[str, str]]:
        (cwd / "home-file").write_text("not a folder\n", encoding="utf-8")
        if flag:
            return ["--home", "home-file", "--profile", "sdk", "--dump-config"], {}
        return ["--profile", "mine", "--dump-config"], {"DSH_HOME": str(cwd / "home-file")}
    return setup


BAD_INPUT: list[tuple[str, Setup, list[str]]] = [
    ("unknown-profile", _fixed("--profile", "nope", "--dump-config"),
     ["unknown profile 'nope'", "{home}/profiles/nope/profile.toml", "--from-default-profile"]),
    ("unknown-profile-shorthand", _fixed("nope"), ["unknown profile 'nope'"]),
    ("name-dotdot", _fixed("--profile", "..", "--dump-config"), ["invalid profile name '..'"]),
    ("name-dotdot-shorthand", _fixed(".."), ["invalid profile name '..'"]),
    ("name-slash", _fixed("--profile", "a/b", "--dump-config"), ["invalid profile name 'a/b'"]),
    ("name-empty", _fixed("--profile", "", "--dump-config"), ["--profile needs a non-empty"]),
    ("name-empty-inline", _fixed("--profile=", "--dump-config"), ["--profile needs a non-empty"]),
    ("name-dot-new", _fixed("--profile", ".", "--from-default-profile", "sdk"),
     ["invalid profile name '.'"]),
    ("toml-invalid", _profile_toml("[profile\nbundles = 3\n"),
     ["{home}/profiles/bad/profile.toml: not valid TOML"]),
    ("toml-patch-reload", _profile_toml('[profile]\nbundles = []\npatch-reload = "often"\n'),
     ["{home}/profiles/bad/profile.toml: profile.patch-reload must be one of live, startup, "
      "got 'often'"]),
    ("bundle-missing", _profile_toml('[profile]\nbundles = ["dsh-base", "no-such"]\n'),
     ["{home}/profiles/bad/profile.toml: profile.bundles: bundle 'no-such' not found"]),
    ("patch-not-list", _patch("agent: {disabled: true}\n"),
     ["{cwd}/p.yml:1: a patch file must be a YAML list"]),
    ("patch-scalar-entry", _patch("- id: agent\n  disabled: true\n- just text\n"),
     ["{cwd}/p.yml:3: each patch entry must be a mapping"]),
    ("patch-insert-not-list", _patch("- insert:\n    id: x\n    name: y\n"),
     ["{cwd}/p.yml:2: 'insert' must be a list of rows"]),
    ("patch-unknown-tag", _patch("- id: agent\n  config:\n    key: !vault secret/x\n"),
     ["{cwd}/p.yml:3: unknown tag !vault"]),
    ("patch-recursive-alias", _patch("- id: agent\n  config: &x {k: *x}\n"),
     ["{cwd}/p.yml: a recursive YAML alias"]),
    ("patch-invalid-yaml", _patch("- id: agent\n  config: {a: [1\n"),
     ["{cwd}/p.yml:", "not valid YAML"]),
    ("profile-patch-not-list", _patch("{}\n", where="profile"),
     ["{home}/profiles/sdk/patch.yml:1: a patch file must be a YAML list"]),
    ("home-patch-insert-not-list", _patch("- insert: row\n", where="home"),
     ["{home}/patch.yml:1: 'insert' must be a list of rows"]),
    ("patch-missing", _fixed("--profile", "sdk", "--patch", "missing.yml", "--dump-config"),
     ["--patch missing.yml: file not found ({cwd}/missing.yml)"]),
    ("env-malformed-cwd", _env_file("GOOD=sk-do-not-print\nnot an assignment\n", "cwd"),
     ["{cwd}/.env:2: malformed line (expected NAME=value)"]),
    ("env-malformed-home", _env_file("'unterminated\n", "home"),
     ["{home}/.env:1: malformed line"]),
    ("env-path-refused", _env_file("PATH=sk-do-not-print\n", "home"),
     ["{home}/.env:1: PATH is bootstrap-only and refused from any .env"]),
    ("env-dsh-home-refused", _env_file("OK=1\nDSH_HOME=sk-do-not-print\n", "home"),
     ["{home}/.env:2: DSH_HOME is bootstrap-only"]),
    ("home-is-file-flag", _home_is_file(True),
     ["{cwd}/home-file: exists and is not a directory"]),
    ("home-is-file-custom-profile", _home_is_file(False),
     ["{cwd}/home-file: exists and is not a directory"]),
]


@pytest.mark.parametrize(("text", "name", "why"), [
    ("PATH=sk-do-not-print\n", "PATH", "it is bootstrap-only"),
    ("HTTPS_PROXY=http://sk-do-not-print:1\n", "HTTPS_PROXY",
     "a project's .env may not route credentials"),
])
def test_a_refused_name_in_a_project_env_is_ignored_with_one_warning(
        run_dsh: RunDsh, tmp_path: Path, text: str, name: str, why: str) -> None:
    """Not bad input: the project's ``.env`` was written for its own tools, and dsh must
    keep working in any repository (docs/contracts.md)."""
    cwd = tmp_path / "cwd"
    (cwd / ".env").write_text(f"# the project's\n{text}", encoding="utf-8")
    proc = run_dsh("--profile", "sdk-minimal", "--patch", str(OFFLINE), "-h")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("dsh: warning")]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith(f"dsh: warning: {cwd / '.env'}:2: {name} ignored: {why}")
    assert "sk-do-not-print" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(("setup", "expected"), [(s, e) for _, s, e in BAD_INPUT],
                         ids=[name for name, _, _ in BAD_INPUT])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
        run_dsh: RunDsh, dsh_home: Path, tmp_path: Path,
        snapshot_tree: Callable[[Path], Any], setup: Setup, expected: list[str]) -> None:
    cwd = tmp_path / "cwd"
    profiles.seed_template(dsh_home, "sdk")  # an existing home with a seeded profile
    args, env = setup(dsh_home, cwd)
    before = snapshot_tree(tmp_path)
    proc = run_dsh(*args, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dsh: error: ")
    for fragment in expected:
        assert fragment.format(home=dsh_home, cwd=cwd) in lines[0]
    assert "sk-do-not-print" not in proc.stderr  # no diagnostic prints a value
    assert snapshot_tree(tmp_path) == before


def test_bad_input_on_a_missing_home_creates_no_home(run_dsh: RunDsh, tmp_path: Path) -> None:
    for args in (["--profile", "nope", "--dump-config"], ["--profile", "..", "--dump-config"],
                 ["--profile", "..", "--from-default-profile", "sdk"]):
        proc = run_dsh("--home", "never", *args)
        assert proc.returncode == 2
        assert not (tmp_path / "cwd" / "never").exists(), args
