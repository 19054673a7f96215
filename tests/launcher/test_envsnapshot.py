"""Tests for :mod:`dsh.config.envsnapshot` and :mod:`dsh.config.envfile`: precedence, refused
names, and no value in messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.config.envfile import CHANGED, TRUSTED, UNTRUSTED, read_env_file
from dsh.config.envsnapshot import snapshot
from dsh.config.prepare import prepare
from dsh.config.resolve import composed, resolve
from dsh.core.errors import EnvFileError
from dsh.core.launch import EnvSnapshot

SECRET = "sk-very-secret-value"


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` and return it."""
    path.write_text(text, encoding="utf-8")
    return path


def test_precedence_environment_then_cwd_then_home(dsh_home: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    write(dsh_home / ".env", "A=home\nB=home\nC=home\nD=home\n")
    write(cwd / ".env", "A=cwd\nB=cwd\nD=cwd\n")
    env = snapshot(dsh_home, cwd, {"A": "launch", "D": ""})
    assert dict(env) == {"A": "launch", "B": "cwd", "C": "home", "D": "cwd"}
    assert env.origin("A") == "environment"
    assert env.origin("B") == str(cwd / ".env")
    assert env.origin("C") == str(dsh_home / ".env")
    assert env.origin("missing") is None


def test_cwd_equal_to_home_reads_the_file_once_as_home(dsh_home: Path) -> None:
    write(dsh_home / ".env", "HTTPS_PROXY=http://proxy:3128\n")
    env = snapshot(dsh_home, dsh_home, {})
    assert env["HTTPS_PROXY"] == "http://proxy:3128"


def test_defaults_fill_only_unset_names(dsh_home: Path) -> None:
    env = snapshot(dsh_home, dsh_home, {"A": "1"})
    filled = env.with_defaults({"A": "default", "B": "default"})
    assert dict(filled) == {"A": "1", "B": "default"}
    assert filled.origin("B") == "default"
    assert "B" not in env


def test_snapshot_is_immutable_and_repr_hides_values() -> None:
    env = EnvSnapshot({"KEY": SECRET}, {"KEY": "environment"})
    with pytest.raises(TypeError):
        env["KEY"] = "other"  # type: ignore[index]
    assert SECRET not in repr(env)
    assert env.child_environ(scrub=frozenset({"KEY"})) == {}
    child = env.child_environ()
    child["KEY"] = "changed"
    assert env["KEY"] == SECRET


def test_values_parse_like_dotenv(tmp_path: Path) -> None:
    path = write(tmp_path / ".env", "# comment\n\nexport A=1\nB='two words'\nC=\"x=y\"\nD=\n")
    assert read_env_file(path, is_home=False).values == {"A": "1", "B": "two words",
                                                         "C": "x=y", "D": ""}


def test_malformed_line_names_file_and_line_but_no_value(tmp_path: Path) -> None:
    path = write(tmp_path / ".env", f"OK=1\nTOKEN={SECRET}\nthis is not an assignment\n")
    with pytest.raises(EnvFileError) as info:
        read_env_file(path, is_home=False)
    assert str(info.value) == f"{path}:3: malformed line (expected NAME=value)"
    assert info.value.exit_code == 2


BOOTSTRAP = ["PATH", "PYTHONPATH", "PYTHONHOME", "DSH_HOME", "DSH_ANYTHING", "LD_PRELOAD",
             "DYLD_LIBRARY_PATH"]
ROUTING = ["HTTPS_PROXY", "http_proxy", "NO_PROXY", "ALL_PROXY", "SSL_CERT_FILE",
           "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
           "DEEPSEEK_BASE_URL", "openai_base_url", "OPENAI_API_BASE", "ANTHROPIC_API_URL",
           "DSH_POSTGRES_DSN"]


@pytest.mark.parametrize("name", BOOTSTRAP)
def test_bootstrap_names_are_an_error_in_the_home_env_file(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / ".env", f"OK=1\n{name}={SECRET}\n")
    with pytest.raises(EnvFileError) as info:
        read_env_file(path, is_home=True)
    assert str(info.value) == (f"{path}:2: {name} is bootstrap-only and refused from any .env; "
                               "set it in the launching environment")
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("name", BOOTSTRAP)
def test_bootstrap_names_are_ignored_in_a_project_env_file_with_a_warning(
        tmp_path: Path, name: str) -> None:
    """Trusted or not: they take effect before any ``.env`` is read."""
    path = write(tmp_path / ".env", f"OK=1\n{name}={SECRET}\n")
    for verdict in (UNTRUSTED, TRUSTED):
        read = read_env_file(path, is_home=False, trusted=lambda r, v=verdict: v)
        assert read.values == {"OK": "1"}
        assert read.ignored == (f"{path}:2: {name} ignored: it is bootstrap-only (it takes "
                                "effect before any .env is read); set it in the launching "
                                "environment",)


@pytest.mark.parametrize("name", ROUTING)
def test_routing_names_only_from_the_home_or_a_trusted_project(tmp_path: Path,
                                                               name: str) -> None:
    path = write(tmp_path / ".env", f"{name}=value\nOTHER=1\n")
    assert read_env_file(path, is_home=True) == ({name: "value", "OTHER": "1"}, ())
    untrusted = read_env_file(path, is_home=False)
    assert untrusted.values == {"OTHER": "1"}
    assert untrusted.ignored == (
        f"{path}:1: {name} ignored: a project's .env may not route credentials (base URLs, "
        f"proxies, CA bundles, DSH_POSTGRES_DSN) unless you trust the folder: dsh trust "
        f"{tmp_path}",)
    asked: list[dict[str, str]] = []
    trusted = read_env_file(path, is_home=False,
                            trusted=lambda r: asked.append(dict(r)) or TRUSTED)
    assert trusted == ({name: "value", "OTHER": "1"}, ())
    assert asked == [{name: "value"}]  # exactly the routing settings, once
    changed = read_env_file(path, is_home=False, trusted=lambda r: CHANGED)
    assert changed.values == {"OTHER": "1"}
    assert changed.ignored == (
        f"{path}:1: {name} ignored: this folder's credential routing changed since you "
        f"trusted it (`dsh trust {tmp_path}` accepts it as it is now)",)


def test_routing_names_are_taken_all_together_or_not_at_all(tmp_path: Path) -> None:
    path = write(tmp_path / ".env", "HTTPS_PROXY=p\nA=1\nPYTHONPATH=x\nX_BASE_URL=u\n")
    read = read_env_file(path, is_home=False)
    assert read.values == {"A": "1"}
    assert [w.split(" ignored")[0] for w in read.ignored] == [
        f"{path}:1: HTTPS_PROXY", f"{path}:3: PYTHONPATH", f"{path}:4: X_BASE_URL"]


def test_trust_is_asked_only_when_a_routing_name_is_there(tmp_path: Path) -> None:
    path = write(tmp_path / ".env", "A=1\n")

    def never(routing: object) -> str:
        raise AssertionError("trust looked up for a file without routing names")

    assert read_env_file(path, is_home=False, trusted=never).values == {"A": "1"}


def test_the_snapshot_trusts_the_settings_the_user_trusted(dsh_home: Path,
                                                           tmp_path: Path) -> None:
    from dsh.config import trust

    project = tmp_path / "project"
    project.mkdir()
    write(project / ".env", "DEEPSEEK_BASE_URL=http://127.0.0.1:9/v1\nA=1\n")
    env = snapshot(dsh_home, project, {})
    assert "DEEPSEEK_BASE_URL" not in env and len(env.warnings) == 1
    assert trust.add(dsh_home, project) == "added"
    env = snapshot(dsh_home, project, {})
    assert env["DEEPSEEK_BASE_URL"] == "http://127.0.0.1:9/v1" and env.warnings == ()
    assert env.with_defaults({"X": "1"}).warnings == ()
    write(project / ".env", "DEEPSEEK_BASE_URL=http://127.0.0.1:9/v1\nA=2\nB=3\n")
    assert snapshot(dsh_home, project, {})["DEEPSEEK_BASE_URL"]  # other names: no matter
    write(project / ".env", "DEEPSEEK_BASE_URL=http://evil.example/v1\nA=1\n")
    env = snapshot(dsh_home, project, {})
    assert "DEEPSEEK_BASE_URL" not in env and "changed since you trusted" in env.warnings[0]
    assert trust.add(dsh_home, project) == "updated"
    assert snapshot(dsh_home, project, {})["DEEPSEEK_BASE_URL"] == "http://evil.example/v1"
    assert trust.add(dsh_home, project) == "unchanged"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_bytes(b"A=\xff\n")
    with pytest.raises(EnvFileError, match=r"\.env: not UTF-8 text$"):
        read_env_file(path, is_home=False)


def test_malformed_cwd_env_fails_the_snapshot(dsh_home: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    write(cwd / ".env", "=nothing\n")
    with pytest.raises(EnvFileError, match=r"project/\.env:1: "):
        snapshot(dsh_home, cwd, {})


def test_routing_names_of_a_config() -> None:
    from dsh.config.tags import EnvRef, routing_names

    config = {"base_url_env": "MY_URL", "api_key_env": "MY_KEY", "timeout_env": "T",
              "servers": [{"url": EnvRef("TRACKER_URL"), "env": {"X": EnvRef("X")}}],
              "proxy": EnvRef("P", "d"), "db": {"dsn": EnvRef("DB")},
              "headers": {"Authorization": EnvRef("AUTH")}}
    assert routing_names(config) == {"MY_URL", "TRACKER_URL", "P", "DB"}


def test_the_trees_routing_names_count_as_routing(tmp_path: Path) -> None:
    path = write(tmp_path / ".env", "TRACKER_URL=u\nOTHER=1\n")
    read = read_env_file(path, is_home=False, routing_names=frozenset({"TRACKER_URL"}))
    assert read.values == {"OTHER": "1"} and "TRACKER_URL ignored" in read.ignored[0]


def test_a_live_edit_cannot_read_an_address_from_the_project_env(dsh_home: Path,
                                                                 tmp_path: Path) -> None:
    """The snapshot is fixed at launch; a patch edited later that reads a URL from a
    variable the project's ``.env`` set gets nothing for it (as if unset)."""

    project = tmp_path / "project"
    project.mkdir()
    write(project / ".env", "TRACKER_URL=http://127.0.0.1:9/evil\nPLAIN=1\n")
    resolved = resolve(dsh_home, "web", [], project)
    prepared = prepare(composed(resolved), dsh_home, project, [], environ={},
                       layers=lambda: resolved)
    assert prepared.env["TRACKER_URL"] == "http://127.0.0.1:9/evil"  # nothing routed yet
    write(dsh_home / "patch.yml",
          "- id: tools:mcp\n  merge: {config: {servers: [{name: t, url: !env [TRACKER_URL, "
          "'http://127.0.0.1:8/default']}], note: !env PLAIN}}\n")
    assert prepared.recompose is not None
    rows, _ = prepared.recompose()
    mcp = next(r for r in rows if r["id"] == "tools:mcp")
    assert mcp["config"]["servers"][0]["url"] == "http://127.0.0.1:8/default"
    assert mcp["config"]["note"] == "1"


@pytest.mark.parametrize("name", ["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS"])
def test_shell_startup_names_only_from_the_home(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / ".env", f"{name}=./evil.sh\nA=1\n")
    assert read_env_file(path, is_home=True).values == {name: "./evil.sh", "A": "1"}
    for verdict in (UNTRUSTED, TRUSTED):
        read = read_env_file(path, is_home=False, trusted=lambda r, v=verdict: v)
        assert read.values == {"A": "1"}
        assert read.ignored == (f"{path}:1: {name} ignored: it would make every shell "
                                "command run code first; set it in the launching "
                                "environment",)
