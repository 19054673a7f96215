"""The ``cd /`` escape: a model that moves its working directory gains nothing.

Issue 19's first finding: ``working_directory {cd: "/"}`` ran unasked (it changes no
file), and every file tool and the shell sandbox then treated ``/`` as the workspace:
``read_file`` read ``$DSH_HOME/.env``, ``write_file`` wrote outside, and on a ``live``
profile the model rewrote the home ``patch.yml`` to switch its own sandbox off.

Here a scripted model makes exactly those calls through a real ``dsh`` process, with the
dsh home beside the workspace, inside it (the workspace is the home's parent) and around
it (a workspace inside the home): the move is asked about and, with no client to ask,
refused; every path into the home is refused outright, before any guardrail; nothing
outside is written; the home's bytes never change, and on the live profile the sandbox
stays on. A client that approves everything gets its out-of-root reads, but still not the
home (nor the runtime's own ``/proc/PID``): no approval request is ever sent for it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from boundarykit import Attack, tree

from dsh.runtime.tools.sandbox import Policy, probe

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")

CANARY = f"canary-home-env-{os.urandom(8).hex()}"
SANDBOX_OFF = '- {id: tools:shell, merge: {config: {sandbox: {mode: "off"}}}}\n'
PROTECTED = "protected directory"
DENIED = ", outside the workspace root "
SANDBOXED = probe(Policy(mode="workspace-write")).usable


def layout(tmp_path: Path, where: str) -> tuple[Path, Path, Path]:
    """``(home, work, outside)`` for a home ``beside``, ``inside`` or ``around`` the work."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside secret\n")
    if where == "beside":
        home, work = tmp_path / "home", tmp_path / "work"
    elif where == "inside":  # the workspace is the home's parent
        work = tmp_path / "work"
        home = work / "dsh-home"
    else:  # "around": a workspace inside the home
        home = tmp_path / "home"
        work = home / "projects" / "work"
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    work.mkdir(parents=True, exist_ok=True)
    (home / ".env").write_text(f"HOME_SERVICE_TOKEN={CANARY}\n")
    (home / "patch.yml").write_text("[]\n")
    (work / "mine.txt").write_text("my file\n")
    (work / "to-home").symlink_to(home, target_is_directory=True)
    return home, work, outside


def attacks(home: Path, outside: Path) -> list[dict[str, Any]]:
    """What a model trying to leave does, in order."""
    env, patch = str(home / ".env"), str(home / "patch.yml")
    calls: list[dict[str, Any]] = [
        {"name": "working_directory", "arguments": {"cd": "/"}},
        {"name": "read_file", "arguments": {"path": env}},
        {"name": "read_file", "arguments": {"path": "to-home/.env"}},
        {"name": "read_file", "arguments": {"path": os.path.relpath(env, "/")}},
        {"name": "write_file", "arguments": {"path": str(outside / "new.txt"),
                                             "content": "escaped"}},
        {"name": "write_file", "arguments": {"path": patch, "content": SANDBOX_OFF}},
        {"name": "edit_file", "arguments": {"path": patch, "old_string": "[]",
                                            "new_string": SANDBOX_OFF}},
        {"name": "list_directory", "arguments": {"path": str(home)}},
        {"name": "glob", "arguments": {"pattern": "**/*", "path": str(home)}},
        {"name": "grep", "arguments": {"pattern": "canary", "path": str(home)}},
        {"name": "bash", "arguments": {"command": "cat .env", "workdir": str(home)}},
        {"name": "working_directory", "arguments": {"cd": str(home)}},
    ]
    if SANDBOXED:  # unsandboxed, the shell is the user's: nothing to test there
        calls.append({"name": "bash", "arguments": {
            "command": f"cat {env}; printf %s '{SANDBOX_OFF}' > {patch}; echo tried"}})
    calls.append({"name": "working_directory", "arguments": {}})
    return calls


def config(home: Path) -> dict[str, bytes]:
    """The user's own files in the home: ``.env``, ``patch.yml`` and the profiles (what
    the runtime itself writes, the session database and caches, left out)."""
    return {name: data for name, data in tree(home).items()
            if name in (".env", "patch.yml") or name.startswith("profiles/")}


def unchanged(home: Path, before: dict[str, bytes]) -> bool:
    """Whether every user file ``before`` held still has its bytes (dsh may seed more)."""
    after = config(home)
    return {name: after.get(name) for name in before} == before


def live_profile(home: Path, run_dsh: Callable[..., Any]) -> None:
    """Custom profile ``p`` (a copy of ``sdk``), reloading patches live."""
    done = run_dsh("--profile", "p", "--from-default-profile", "sdk", "--dump-config",
                   env={"DSH_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    toml = home / "profiles" / "p" / "profile.toml"
    toml.write_text(toml.read_text().replace('patch-reload = "startup"', 'patch-reload = "live"'))


def sandbox_mode(attack: Attack) -> str:
    rows = attack.call("config/get")["result"]["config"]["rows"]
    tools = next(r for r in rows if r["id"] == "tools")["config"]
    shell = next(r for r in tools if r["id"] == "tools:shell")
    return shell["config"]["sandbox"]["mode"]


@pytest.mark.parametrize("where", ["beside", "inside", "around"])
@pytest.mark.parametrize("profile", ["sdk", "live"])
def test_cd_slash_then_the_home(tmp_path: Path, where: str, profile: str,
                                run_dsh: Callable[..., Any]) -> None:
    home, work, outside = layout(tmp_path, where)
    name = "sdk"
    if profile == "live":
        live_profile(home, run_dsh)
        name = "p"
    calls = attacks(home, outside)
    before_home, before_outside = config(home), tree(outside)
    with Attack(tmp_path, calls, cwd=work, profile=name,
                env={"DSH_HOME": str(home)}) as attack:
        assert sandbox_mode(attack) == "workspace-write"
        turn = attack.turn()
        assert turn.reason == {"kind": "completed"}
        assert len(turn.results) == len(calls)
        texts = turn.texts()
        for call, result in zip(calls, turn.results, strict=True):
            assert CANARY not in result["text"], (call, result)
        # cd / is asked about; nobody can answer, so it does not happen.
        assert turn.results[0]["error"] and DENIED in texts[0], texts[0]
        # The home's path relative to "/": the session never moved, so it names a file
        # in the workspace that is not there.
        assert turn.results[3]["error"] and "No such file" in texts[3], texts[3]
        # Every way into the home is refused outright, whatever the policy would say.
        for index in (1, 2, 5, 6, 7, 8, 9, 10, 11):
            assert turn.results[index]["error"], (calls[index], texts[index])
            assert turn.results[index]["code"] == "PROTECTED", (calls[index], texts[index])
            assert PROTECTED in texts[index], (calls[index], texts[index])
        # Writing outside is asked about and refused.
        assert turn.results[4]["error"] and DENIED in texts[4], texts[4]
        if SANDBOXED:
            assert texts[12].endswith("tried\n[Command finished with exit code 0]"), texts[12]
        assert texts[-1] == f"Current working directory: {json.dumps(str(work))}"
        assert attack.call("session/working-directory/get", {"sessionId": "s1"})[
            "result"]["cwd"] == str(work)
        assert sandbox_mode(attack) == "workspace-write"  # on the live profile too
        attack.close()
    assert tree(outside) == before_outside
    assert unchanged(home, before_home)
    assert (home / "patch.yml").read_text() == "[]\n"


def test_an_approving_client_still_never_reaches_the_home(tmp_path: Path) -> None:
    home, work, outside = layout(tmp_path, "inside")
    calls = [
        {"name": "working_directory", "arguments": {"cd": "/"}},
        {"name": "read_file", "arguments": {"path": str(outside / "secret.txt")}},
        {"name": "read_file", "arguments": {"path": str(home / ".env")}},
        {"name": "write_file", "arguments": {"path": str(home / "patch.yml"),
                                             "content": SANDBOX_OFF}},
        {"name": "working_directory", "arguments": {"cd": str(home)}},
        # From "/", through the link in the workspace: still the home.
        {"name": "read_file", "arguments": {
            "path": os.path.relpath(work / "to-home" / ".env", "/")}},
        # The runtime's own process: its environment holds the credentials.
        {"name": "read_file", "arguments": {"path": "/proc/self/environ"}},
        {"name": "list_directory", "arguments": {"path": "proc/self/fd"}},
    ]
    before = config(home)
    with Attack(tmp_path, calls, cwd=work, approvals=True,
                env={"DSH_HOME": str(home)}) as attack:
        turn = attack.turn(answer=lambda call: "allow")
        attack.close()
    texts = turn.texts()
    assert texts[0] == 'Current working directory: "/"'  # approved: it moved
    assert texts[1].endswith("outside secret")  # approved: exactly that read
    for index in (2, 3, 4, 5, 6, 7):
        assert turn.results[index]["code"] == "PROTECTED", texts[index]
        assert PROTECTED in texts[index], texts[index]
    # Only the two out-of-root calls were asked about; nothing about the home.
    assert [a["name"] for a in turn.asked] == ["working_directory", "read_file"]
    assert all(str(home) not in json.dumps(a) for a in turn.asked)
    assert CANARY not in json.dumps(turn.results)
    assert unchanged(home, before)


def test_indirect_routes_to_the_home(tmp_path: Path) -> None:
    """Routes an attacker would try next: the runtime's /proc view of the filesystem, a
    link the sandboxed shell plants, a hard link, and a grep or glob of everything."""
    home, work, outside = layout(tmp_path, "beside")
    rel_home = os.path.relpath(home, "/")
    calls: list[dict[str, Any]] = [
        {"name": "read_file", "arguments": {"path": f"/proc/self/root/{rel_home}/.env"}},
        {"name": "read_file", "arguments": {"path": "/proc/self/cwd/../home/.env"}},
        {"name": "read_file", "arguments": {"path": "mine.txt/../../home/.env"}},
        {"name": "grep", "arguments": {"pattern": "canary", "path": "/"}},
        {"name": "glob", "arguments": {"pattern": "**/.env"}},
        {"name": "grep", "arguments": {"pattern": "canary"}},
    ]
    if SANDBOXED:
        calls += [
            {"name": "bash", "arguments": {"command": f"ln -s {home} planted; "
                                                      f"ln {home}/.env hard 2>&1; ls"}},
            {"name": "read_file", "arguments": {"path": "planted/.env"}},
            {"name": "write_file", "arguments": {"path": "planted/patch.yml",
                                                 "content": SANDBOX_OFF}},
        ]
    before = config(home)
    with Attack(tmp_path, calls, cwd=work, env={"DSH_HOME": str(home)}) as attack:
        turn = attack.turn()
        attack.close()
    texts = turn.texts()
    assert CANARY not in json.dumps(turn.results)
    assert turn.results[0]["code"] == "PROTECTED", texts[0]  # the runtime's own /proc
    assert turn.results[1]["code"] == "PROTECTED", texts[1]
    assert turn.results[2]["error"], texts[2]  # a file is no directory to climb out of
    assert f"reaches /, outside the workspace root {os.path.realpath(work)}" in texts[3]
    assert texts[4].startswith("No files match"), texts[4]
    assert texts[5] == "No matches found.", texts[5]
    if SANDBOXED:
        # The home is a cover in the sandbox: nothing of it to link to.
        assert "failed to create hard link" in texts[6], texts[6]
        assert not (work / "hard").exists()
        assert turn.results[7]["code"] == "PROTECTED", texts[7]
        assert turn.results[8]["code"] == "PROTECTED", texts[8]
    assert unchanged(home, before)
    assert tree(outside) == {"secret.txt": b"outside secret\n"}
