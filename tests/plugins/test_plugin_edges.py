"""``dsh plugin`` at its edges: bad input, reads that must write nothing, new profiles,
offline builds, and the doctor of a profile with plugins.

Every refusal is one ``dsh: error:`` line with exit 2 (bad input) or 1 (a build, install
or import that failed), and leaves the home exactly as it was: its whole tree is hashed
before and after. The one thing a failed install writes is its log, under ``logs/``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from pluginkit import FIXTURE, package, tree_state

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
HELLO_PATCH = "- id: tools\n  insert:\n    - {id: greet, name: \"%s:Greeter\"}\n"
GREETER = '''\
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin


class Greeter(Plugin):
    manifest = Manifest(id="greeter", version="1.0", capabilities=frozenset({Capability.TOOL}))
'''


def one_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The single error line of a refused command (exit ``code``)."""
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsh: error: "), done.stderr
    return lines[0]


@pytest.fixture
def added(run_dsh: RunDsh, dsh_home: Path) -> Path:
    """Profile ``p`` (from sdk) with the hello fixture: a home with something to keep."""
    shutil.copytree(FIXTURE, Path.cwd() / "hello")
    done = run_dsh("plugin", "--profile", "p", "add", "--from", "sdk", "./hello")
    assert done.returncode == 0, done.stderr
    return dsh_home


# -- reading writes nothing ----------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ("plugin", "--profile", "nope", "list"),
    ("plugin", "--profile", "nope", "list", "--json"),
    ("doctor", "--profile", "nope"),
    ("--profile", "nope", "--dump-config"),
    ("plugin", "--profile", "nope", "sync"),
    ("plugin", "--profile", "nope", "remove", "x"),
    ("plugin", "--profile", "nope", "order", "dsh-base"),
])
def test_a_missing_profile_is_created_by_no_command(run_dsh: RunDsh, dsh_home: Path,
                                                    command: tuple[str, ...]) -> None:
    before = tree_state(dsh_home)
    done = run_dsh(*command)
    assert done.returncode in (1, 2), done.stderr
    assert tree_state(dsh_home) == before
    if "--json" in command:
        document = json.loads(done.stdout)
        assert not document["ok"] and "unknown profile 'nope'" in document["error"]["message"]
    elif command[0] != "doctor":
        assert "unknown profile 'nope'" in one_error(done, 2)


@pytest.mark.parametrize("command", [
    ("plugin", "--profile", "sdk", "list"),
    ("doctor", "--profile", "sdk"),
    ("info",),
    ("profile", "list"),
    ("plugin", "--profile", "nope", "list"),
])
def test_reading_commands_do_not_create_the_home(run_dsh: RunDsh, tmp_path: Path,
                                                 command: tuple[str, ...]) -> None:
    home = tmp_path / "not-yet"
    done = run_dsh(*command, env={"DSH_HOME": str(home)})
    assert done.returncode in (0, 1, 2), done.stderr
    assert not home.exists()


def test_list_of_a_shipped_template_not_seeded(run_dsh: RunDsh, dsh_home: Path) -> None:
    done = run_dsh("plugin", "--profile", "sdk", "list", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)["data"]
    assert data == {"bundles": ["dsh-base", "dsh-sdk-app"], "requirements": [],
                    "installed": []}
    assert list(dsh_home.iterdir()) == []


def test_the_doctor_of_a_missing_profile_names_the_nearest(run_dsh: RunDsh) -> None:
    done = run_dsh("doctor", "--profile", "hedless", "--json")
    checks = {c["id"]: c for c in json.loads(done.stdout)["data"]["checks"]}
    assert checks["profile.resolvable"]["status"] == "fail"
    assert "Did you mean 'headless'?" in checks["profile.resolvable"]["message"]


# -- bad input: one line, the home unchanged ----------------------------------------------


def test_a_path_that_does_not_exist(run_dsh: RunDsh, added: Path) -> None:
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./nowhere"), 2)
    assert "./nowhere: no such file or directory" in line
    assert tree_state(added) == before


def test_a_folder_that_is_not_a_project(run_dsh: RunDsh, added: Path) -> None:
    (Path.cwd() / "empty").mkdir()
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./empty"), 2)
    assert "not a Python project" in line
    assert tree_state(added) == before


def test_a_package_with_no_bundle(run_dsh: RunDsh, added: Path) -> None:
    package(Path.cwd() / "plain", "plain-lib")
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./plain"), 2)
    assert "plain-lib 1.0 declares no dsh.bundles entry point" in line
    assert "--no-bundle" in line and "docs/plugins.md" in line
    assert tree_state(added) == before
    plain = run_dsh("plugin", "--profile", "p", "add", "--no-bundle", "./plain")
    assert plain.returncode == 0, plain.stderr
    assert "installed as a plain library" in plain.stderr


def test_a_bundle_whose_patch_is_invalid(run_dsh: RunDsh, added: Path) -> None:
    source = package(Path.cwd() / "badpatch", "badpatch", bundle="badpatch",
                     patch="- id: tools\n  insert:\n    - {id: x, name: y, confg: {}}\n")
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./badpatch"), 2)
    # It names the file the author edits, with the line.
    assert f"{source / 'badpatch' / 'patch.yml'}:3: unknown row key 'confg'" in line
    assert "bundle 'badpatch' of badpatch 1.0 is invalid" in line
    assert tree_state(added) == before


def test_a_bundle_without_its_patch_file(run_dsh: RunDsh, added: Path) -> None:
    package(Path.cwd() / "nopatch", "nopatch", bundle="nopatch")
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./nopatch"), 2)
    assert "bundle 'nopatch' of nopatch 1.0: its entry point names 'nopatch', which has no " \
           "patch.yml" in line
    assert tree_state(added) == before


def test_a_row_naming_a_plugin_that_does_not_exist(run_dsh: RunDsh, added: Path) -> None:
    package(Path.cwd() / "ghost", "ghost", bundle="ghost",
            patch="- id: tools\n  insert:\n    - {id: g, name: no-such-plugin}\n")
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./ghost"), 2)
    assert "bundle 'ghost' of ghost 1.0: row 'tools:g': unknown plugin 'no-such-plugin'" in line
    assert tree_state(added) == before


def test_a_plugin_that_imports_a_missing_module(run_dsh: RunDsh, added: Path) -> None:
    package(Path.cwd() / "needy", "needy", bundle="needy", patch=HELLO_PATCH % "needy",
            module_text="import dsh_no_such_module_anywhere\n" + GREETER)
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./needy"), 1)
    assert ("bundle 'needy' of needy 1.0: row 'tools:greet': plugin 'needy:Greeter' failed "
            "to import: ModuleNotFoundError: No module named 'dsh_no_such_module_anywhere'"
            ) in line
    assert tree_state(added) == before


def test_a_plugin_whose_build_fails(run_dsh: RunDsh, added: Path) -> None:
    broken = Path.cwd() / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n[project]\nname = "broken"\nversion = "1"\n')
    (broken / "setup.py").write_text('raise SystemExit("this plugin refuses to build")\n')
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./broken", timeout=180), 1)
    assert "did not run successfully: this plugin refuses to build" in line
    assert "See above" not in line and "nothing was changed" in line
    after = tree_state(added)
    logs = sorted(key for key in after if key.startswith("logs/"))
    assert len(logs) == 1, logs  # the one thing written: the installer's whole log
    assert str(added / logs[0]) in line
    assert "this plugin refuses to build" in (added / logs[0]).read_text()
    assert {k: v for k, v in after.items() if not k.startswith("logs")} == before


def test_a_new_profile_that_fails_leaves_no_trace(run_dsh: RunDsh, dsh_home: Path) -> None:
    package(Path.cwd() / "plain", "plain-lib")
    before = tree_state(dsh_home)
    one_error(run_dsh("plugin", "--profile", "fresh", "add", "./plain"), 2)
    assert tree_state(dsh_home) == before
    # and in a home that did not exist: it still does not
    home = dsh_home.parent / "new-home"
    one_error(run_dsh("plugin", "--profile", "fresh", "add", "./plain",
                      env={"DSH_HOME": str(home)}), 2)
    assert not home.exists()


def test_an_unknown_template(run_dsh: RunDsh, dsh_home: Path) -> None:
    shutil.copytree(FIXTURE, Path.cwd() / "hello")
    line = one_error(run_dsh("plugin", "--profile", "q", "add", "--from", "sdkk", "./hello"), 2)
    assert "--from sdkk: not a shipped template; did you mean 'sdk'?" in line
    assert list(dsh_home.iterdir()) == []


def test_new_into_a_folder_that_exists(run_dsh: RunDsh) -> None:
    (Path.cwd() / "taken").mkdir()
    (Path.cwd() / "taken" / "mine.txt").write_text("keep me")
    before = tree_state(Path.cwd())
    line = one_error(run_dsh("plugin", "new", "taken"), 2)
    assert "taken: already exists" in line
    assert tree_state(Path.cwd()) == before


@pytest.mark.parametrize(("name", "problem"), [
    ("9lives", "is not a Python identifier"),
    ("-x", "use letters, digits"),
    ("dsh-base", "is a shipped bundle's name"),
])
def test_new_with_a_name_that_cannot_be_a_package(run_dsh: RunDsh, name: str,
                                                  problem: str) -> None:
    line = one_error(run_dsh("plugin", "new", "--", name), 2)
    assert problem in line
    assert list(Path.cwd().iterdir()) == []


def test_commands_that_need_a_profile_say_so(run_dsh: RunDsh, dsh_home: Path) -> None:
    line = one_error(run_dsh("plugin", "list"), 2)
    assert "dsh plugin list needs a profile: dsh plugin --profile NAME list" in line
    line = one_error(run_dsh("plugin", "--profile", "p", "new", "x"), 2)
    assert "takes no --profile" in line
    assert list(dsh_home.iterdir()) == []


# -- new profiles, offline builds, the doctor ---------------------------------------------


def test_a_new_profile_starts_from_headless_and_runs(run_dsh: RunDsh, dsh_home: Path) -> None:
    shutil.copytree(FIXTURE, Path.cwd() / "hello")
    done = run_dsh("plugin", "--profile", "mine", "add", "./hello")
    assert done.returncode == 0, done.stderr
    assert "created profile 'mine' from the headless template" in done.stderr
    assert done.stdout == "bundles: dsh-base, dsh-headless, dsh-hello\n"
    assert sorted(p.name for p in (dsh_home / "profiles").iterdir()) == ["mine"]  # no lock
    offline = str(Path(__file__).resolve().parents[2] / "examples" / "offline" / "patch.yml")
    ran = run_dsh("--profile", "mine", "--patch", offline, "Where am I working?")
    assert ran.returncode == 0, ran.stderr


def test_a_profile_with_no_application_says_what_to_do(run_dsh: RunDsh, added: Path) -> None:
    assert run_dsh("plugin", "--profile", "p", "order", "dsh-base", "dsh-hello").returncode == 0
    for args in (("hi",), ("-h",)):
        line = one_error(run_dsh("--profile", "p", *args), 2)
        assert line == (
            "dsh: error: profile 'p' has no application (no row registers command 'main'): "
            "add an application bundle (dsh-headless, dsh-sdk-app, dsh-web-app, "
            "dsh-acp-app), e.g. `dsh plugin --profile p order dsh-base dsh-headless "
            "dsh-hello`")


def test_the_doctor_loads_plugins_from_the_profile(run_dsh: RunDsh, added: Path) -> None:
    done = run_dsh("doctor", "--profile", "p", "--json")
    checks = {c["id"]: c for c in json.loads(done.stdout)["data"]["checks"]}
    assert checks["plugin.tools:hello"] == {"id": "plugin.tools:hello", "status": "ok",
                                            "message": "hello-tool 0.1.0"}
    assert not [c for c in checks.values() if c["status"] == "fail"], checks


def test_offline_builds_with_the_backend_installed_here(run_dsh: RunDsh,
                                                        dsh_home: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling is not installed beside dsh here")
    shutil.copytree(FIXTURE, Path.cwd() / "hello")
    done = run_dsh("plugin", "--profile", "p", "add", "./hello", env={"PIP_NO_INDEX": "1"})
    assert done.returncode == 0, done.stderr
    assert "the build backend could not be fetched (offline?)" in done.stderr


def test_offline_without_the_backend_says_so(run_dsh: RunDsh, dsh_home: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("flit_core") is not None:
        pytest.skip("flit_core is installed here: the offline fallback would build")
    project = Path.cwd() / "flitted"
    (project / "flitted").mkdir(parents=True)
    (project / "flitted" / "__init__.py").write_text('"""x"""\n__version__ = "1"\n')
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["flit_core>=3.2"]\nbuild-backend = "flit_core.buildapi"\n'
        '[project]\nname = "flitted"\nversion = "1"\ndescription = "x"\n')
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./flitted",
                             env={"PIP_NO_INDEX": "1"}), 1)
    assert "No matching distribution found for flit_core" in line
    assert "offline? flit_core is not installed here either" in line
    assert sorted(p.name for p in dsh_home.iterdir()) == ["logs"]


def test_commands_run_one_at_a_time_and_leave_no_lock(run_dsh: RunDsh, added: Path) -> None:
    listed = run_dsh("plugin", "--profile", "p", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    synced = run_dsh("plugin", "--profile", "p", "sync")
    assert synced.returncode == 0, synced.stderr
    assert not list((added / "profiles").glob(".*"))


# -- a row config its own plugin refuses ----------------------------------------------------

STRICT = '''\
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin


class Greeter(Plugin):
    manifest = Manifest(id="greeter", version="1.0", capabilities=frozenset({Capability.TOOL}),
                        config_schema={"type": "object",
                                       "properties": {"greeting": {"type": "string"}},
                                       "additionalProperties": False})
'''


def test_add_refuses_a_bundle_whose_row_config_breaks_its_schema(run_dsh: RunDsh,
                                                                  added: Path) -> None:
    """It used to install, and then the profile could not start."""
    package(Path.cwd() / "strict", "strict", bundle="strict", module_text=STRICT,
            patch="- id: tools\n  insert:\n    - {id: greet, name: \"strict:Greeter\", "
                  "config: {greeting: 5}}\n")
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "add", "./strict"), 2)
    assert line == ("dsh: error: profile 'p' would not start: row 'tools:greet' "
                    "config.greeting: expected string (plugin 'strict:Greeter')")
    assert tree_state(added) == before
    # The same bundle with a config that fits goes in, and the profile starts.
    (Path.cwd() / "strict" / "strict" / "patch.yml").write_text(
        "- id: tools\n  insert:\n    - {id: greet, name: \"strict:Greeter\", "
        "config: {greeting: hello}}\n")
    assert run_dsh("plugin", "--profile", "p", "add", "./strict").returncode == 0
    assert run_dsh("--profile", "p", "-h").returncode == 0


def test_the_doctor_fails_a_row_config_that_breaks_its_schema(run_dsh: RunDsh,
                                                               added: Path) -> None:
    """A patch giving a row a config its plugin refuses: the doctor said all was well,
    then the profile could not start."""
    (added / "patch.yml").write_text("- {id: agent, merge: {config: {max_steps: many}}}\n")
    started = run_dsh("--profile", "p", "-h")
    assert started.returncode == 2
    assert "row 'agent' config.max_steps: expected integer" in started.stderr
    done = run_dsh("doctor", "--profile", "p", "--json")
    assert done.returncode == 1, done.stderr
    checks = {c["id"]: c for c in json.loads(done.stdout)["data"]["checks"]}
    assert checks["config.agent"] == {
        "id": "config.agent", "status": "fail",
        "message": "row 'agent' config.max_steps: expected integer: the profile cannot start"}
    assert "config.rows" not in checks
    (added / "patch.yml").unlink()
    done = run_dsh("doctor", "--profile", "p", "--json")
    checks = {c["id"]: c for c in json.loads(done.stdout)["data"]["checks"]}
    assert checks["config.rows"]["status"] == "ok" and "config.agent" not in checks


def test_order_refuses_to_leave_out_an_installed_plugins_bundle(run_dsh: RunDsh,
                                                                 added: Path) -> None:
    """A partial list used to drop the plugin's bundle silently, and the next command
    brought it back."""
    before = tree_state(added)
    line = one_error(run_dsh("plugin", "--profile", "p", "order", "dsh-base", "dsh-sdk-app"), 2)
    assert line == (
        "dsh: error: order leaves out 'dsh-hello' (of dsh-hello-plugin 0.1.0), installed in "
        "profile 'p': name every installed plugin's bundle (the order now: dsh-base "
        "dsh-sdk-app dsh-hello), or remove the plugin with "
        "`dsh plugin --profile p remove dsh-hello-plugin`")
    assert tree_state(added) == before
    # A full list reorders (a shipped bundle may be left out).
    assert run_dsh("plugin", "--profile", "p", "order", "dsh-hello", "dsh-base").returncode == 0
    listed = json.loads(run_dsh("plugin", "--profile", "p", "list", "--json").stdout)
    assert listed["data"]["bundles"] == ["dsh-hello", "dsh-base"]


def test_profile_and_home_after_the_subcommand_are_taken(run_dsh: RunDsh, dsh_home: Path,
                                                         tmp_path: Path) -> None:
    """``dsh plugin add --profile P`` was refused with no hint (``No such option``),
    though ``dsh doctor`` takes ``--profile`` there."""
    shutil.copytree(FIXTURE, Path.cwd() / "hello")
    done = run_dsh("plugin", "add", "--from", "sdk", "./hello", "--profile", "p")
    assert done.returncode == 0, done.stderr
    listed = run_dsh("plugin", "list", "--json", "--profile", "p")
    assert listed.returncode == 0, listed.stderr
    assert "dsh-hello" in json.loads(listed.stdout)["data"]["bundles"]
    # The same profile on both sides is fine; two different ones are refused.
    assert run_dsh("plugin", "--profile", "p", "list", "--profile", "p").returncode == 0
    line = one_error(run_dsh("plugin", "--profile", "p", "list", "--profile", "q"), 2)
    assert line == ("dsh: error: dsh plugin: --profile given twice ('p' before the command, "
                    "'q' after it)")
    # --home after the command too: another home has no profile p.
    other = tmp_path / "other-home"
    line = one_error(run_dsh("plugin", "list", "--profile", "p", "--home", str(other)), 2)
    assert line.startswith("dsh: error: unknown profile 'p' (no ") and str(other) in line
    # `new` takes no profile, wherever it is given.
    line = one_error(run_dsh("plugin", "new", "thing", "--profile", "p"), 2)
    assert line == ("dsh: error: dsh plugin new writes a package and takes no --profile; "
                    "add it to a profile afterwards: dsh plugin --profile p add ./thing")
