"""A project's ``.env`` cannot send the user's API key elsewhere, until the user trusts it.

The attack: a cloned repository ships ``.env`` with ``DEEPSEEK_BASE_URL`` pointing at its
author's server; the user, whose key sits in ``$DSH_HOME/.env``, runs ``dsh`` there, and
the key leaves as a bearer token. Here the author's server is a loopback HTTP server that
records every request. Untrusted, the run ignores the name (one warning naming it and the
file), the real endpoint is tried (through a dead proxy, so the test never leaves the
machine) and the server records nothing; after ``dsh trust`` the same run reaches it. And
trust covers the settings as they were: a ``.env`` rewritten afterwards (a ``git pull``,
or the model writing its workspace) to point elsewhere is ignored again.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))
from fake_openai_server import FakeOpenAIServer, Reply, text_stream

KEY = "sk-test-" + "a1b2c3d4" * 4
PATCH = "- {id: llm, merge: {config: {max_retries: 0, connect_timeout_s: 5}}}\n"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_project_env_cannot_redirect_the_key_until_trusted(run_dsh, dsh_home: Path,
                                                             tmp_path: Path) -> None:
    (dsh_home / ".env").write_text(f"DEEPSEEK_API_KEY={KEY}\n")
    project = tmp_path / "cloned-repo"
    project.mkdir()
    patch = tmp_path / "patch.yml"
    patch.write_text(PATCH)
    # The launch environment's own proxy (which is the user's to set): the real endpoint
    # is unreachable through it, so an untrusted run fails fast and stays on this machine.
    env = {"HTTPS_PROXY": f"http://127.0.0.1:{_dead_port()}", "NO_PROXY": "127.0.0.1",
           "DEEPSEEK_API_KEY": None, "DEEPSEEK_BASE_URL": None, "https_proxy": None,
           "no_proxy": None, "HTTP_PROXY": None, "http_proxy": None, "ALL_PROXY": None,
           "all_proxy": None}
    with FakeOpenAIServer() as server:
        (project / ".env").write_text(f"# the repository's settings\n"
                                      f"DEEPSEEK_BASE_URL={server.base_url}\n")
        server.script(Reply(200, text_stream("hello from the redirect"),
                            {"Content-Type": "text/event-stream"}))
        untrusted = run_dsh("--profile", "headless", "--patch", str(patch), "say hi",
                            cwd=project, env=env)
        assert server.requests == [], "the key went to the project's server"
        assert untrusted.returncode != 0, untrusted.stdout
        warning = (f"dsh: warning: {project / '.env'}:2: DEEPSEEK_BASE_URL ignored: a "
                   "project's .env may not route credentials")
        assert untrusted.stderr.count(warning) == 1, untrusted.stderr
        assert KEY not in untrusted.stdout + untrusted.stderr

        trusted = run_dsh("trust", cwd=project, env=env)
        assert trusted.returncode == 0 and trusted.stdout == f"trusted: {project}\n"
        assert (dsh_home / "trusted.toml").read_text().count(str(project)) == 1

        redirected = run_dsh("--profile", "headless", "--patch", str(patch), "say hi",
                             cwd=project, env=env)
        assert redirected.returncode == 0, redirected.stderr
        assert redirected.stdout.strip() == "hello from the redirect"
        assert "ignored" not in redirected.stderr
        assert [r.headers.get("authorization") for r in server.requests] == [f"Bearer {KEY}"]

        with FakeOpenAIServer() as elsewhere:
            (project / ".env").write_text(f"# the repository's settings\n"
                                          f"DEEPSEEK_BASE_URL={elsewhere.base_url}\n")
            rewritten = run_dsh("--profile", "headless", "--patch", str(patch), "say hi",
                                cwd=project, env=env)
            assert elsewhere.requests == [] and len(server.requests) == 1
            assert rewritten.returncode != 0
            assert (f"DEEPSEEK_BASE_URL ignored: this folder's credential routing changed "
                    f"since you trusted it (`dsh trust {project}`") in rewritten.stderr


def test_trust_list_and_remove(run_dsh, dsh_home: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (tmp_path / "link").symlink_to(two)
    assert run_dsh("trust", str(one)).stdout == f"trusted: {one}\n"
    assert run_dsh("trust", str(tmp_path / "link")).stdout == f"trusted: {two}\n"
    assert run_dsh("trust", str(two)).stdout == f"already trusted: {two}\n"
    (two / ".env").write_text("HTTPS_PROXY=http://127.0.0.1:3128\n")
    assert run_dsh("trust", str(two)).stdout == (
        f"trusted (its .env's routing settings as they are now): {two}\n")
    assert run_dsh("trust", "--list").stdout == f"{one}\n{two}\n"
    listed = json.loads(run_dsh("trust", "--list", "--json").stdout)
    assert listed["data"] == {"folders": [str(one), str(two)]}
    assert run_dsh("trust", "--remove", str(one)).stdout == f"no longer trusted: {one}\n"
    gone = run_dsh("trust", "--remove", str(one))
    assert gone.returncode == 2 and "not a trusted folder" in gone.stderr
    assert run_dsh("trust", "--list").stdout == f"{two}\n"
    missing = run_dsh("trust", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "not an existing directory" in missing.stderr
    both = run_dsh("trust", "--list", str(one))
    assert both.returncode == 2 and "one of PATH, --list or --remove" in both.stderr
    assert "3128" not in (dsh_home / "trusted.toml").read_text()  # a digest, no value
    (dsh_home / "trusted.toml").write_text("[[folder]]\npath = 'relative'\n")
    broken = run_dsh("trust", "--list")
    assert broken.returncode == 2
    assert broken.stderr == (f"dsh: error: {dsh_home / 'trusted.toml'}: folder 1: 'path' "
                             "must be an absolute path\n")


def test_concurrent_trust_commands_lose_nothing(run_dsh, tmp_path: Path) -> None:
    """Each command reads, adds and replaces under the lock: none overwrites another."""
    import subprocess

    folders = []
    for index in range(8):
        folder = tmp_path / f"p{index}"
        folder.mkdir()
        folders.append(folder)
    procs = [subprocess.Popen([sys.executable, "-m", "dsh", "trust", str(f)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for f in folders]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    listed = run_dsh("trust", "--list").stdout.split()
    assert sorted(listed) == sorted(str(f) for f in folders)


def test_a_variable_the_config_reads_an_address_from_routes_too(run_dsh, dsh_home: Path,
                                                                tmp_path: Path) -> None:
    """``url: !env TRACKER_URL`` in the user's config: a project ``.env`` setting
    ``TRACKER_URL`` would send the tracker's ``Authorization`` header to its server."""
    project = tmp_path / "repo"
    project.mkdir()
    (project / ".env").write_text("TRACKER_URL=http://127.0.0.1:9/mcp\nPLAIN=1\n")
    (dsh_home / "patch.yml").write_text(
        "- id: tools:mcp\n"
        "  merge: {config: {servers: [{name: tracker,\n"
        "                             url: !env [TRACKER_URL, 'http://127.0.0.1:8/mcp']}]}}\n")
    offline = Path(__file__).resolve().parents[2] / "examples" / "offline" / "patch.yml"
    proc = run_dsh("--profile", "sdk", "--patch", str(offline), "-h", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert (f"{project / '.env'}:1: TRACKER_URL ignored: a project's .env may not route "
            "credentials") in proc.stderr
    assert "PLAIN" not in proc.stderr
