"""The macOS shell sandbox: the generated Seatbelt profile, as text and as decisions.

No macOS machine runs here, so the profile is checked three ways:

* **as text**, against pinned files (``tests/tools/seatbelt/*.sb``) for fixed inputs: any
  change to what a sandboxed command may touch shows up as a diff to review
  (``DSH_UPDATE_SNAPSHOTS=1`` rewrites them);
* **as decisions**, by evaluating the profile's path rules the way Seatbelt does (the last
  matching rule wins) for the paths that matter: the user's home and the dsh home hidden,
  its ``.env`` never readable, toolchains shown, roots writable, protected paths never;
* **through** ``sandbox.wrap`` with the module's platform switched to macOS: a real
  layout of folders becomes ``sandbox-exec -p PROFILE bash -c ...`` holding exactly
  those folders (real paths), and the dsh home's ``.env`` names are removed first.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from dsh.runtime.tools import sandbox, seatbelt

PINNED = Path(__file__).with_name("seatbelt")
UPDATE = os.environ.get("DSH_UPDATE_SNAPSHOTS") == "1"  # read before fixtures strip DSH_*
HOME = "/Users/ada"
INPUTS = {
    "roots": [f"{HOME}/src/app", f"{HOME}/shared"],
    "hidden": [HOME, f"{HOME}/.dsh", f"{HOME}/src/app/secrets"],
    "readable": [f"{HOME}/.pyenv", f"{HOME}/.cargo", f"{HOME}/.dsh/plugins"],
    "masked": [f"{HOME}/.dsh/.env"],
    "private": [f"{HOME}/.dsh", f"{HOME}/src/app/secrets"],
    "scratch": ["/private/tmp", "/private/var/folders/xy/abc/T"],
}
CASES = {"workspace-write": {"writable": True, "network": False},
         "read-only-network": {"writable": False, "network": True}}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_profile_is_the_pinned_text(name: str) -> None:
    text = seatbelt.profile(**CASES[name], **INPUTS)
    pinned = PINNED / f"{name}.sb"
    if UPDATE:
        pinned.parent.mkdir(exist_ok=True)
        pinned.write_text(text)
    assert text == pinned.read_text()


_RULE = re.compile(r'^\((allow|deny) ([a-z*\- ]+?) \((subpath|literal) "((?:[^"\\]|\\.)*)"\)\)$')


def decide(text: str, operation: str, path: str) -> bool:
    """Whether Seatbelt would allow ``operation`` (``file-read`` or ``file-write``) on
    ``path`` under ``text``: the last matching path rule wins; the profile's unconditional
    ``(allow file-read*)`` and ``(deny default)`` come first."""
    allowed = operation == "file-read" and "(allow file-read*)\n" in text
    for line in text.splitlines():
        match = _RULE.match(line)
        if match is None:
            continue
        verdict, operations, kind, target = match.groups()
        if f"{operation}*" not in operations.split():
            continue
        target = target.replace('\\"', '"').replace("\\\\", "\\")
        hit = path == target if kind == "literal" else (
            path == target or path.startswith(target.rstrip("/") + "/"))
        if hit:
            allowed = verdict == "allow"
    return allowed


@pytest.mark.parametrize(("operation", "path", "allowed"), [
    ("file-read", "/usr/bin/env", True),                  # the system is readable
    ("file-write", "/usr/bin/env", False),                # and not writable
    ("file-read", f"{HOME}/.ssh/id_ed25519", False),      # the user's home is hidden
    ("file-write", f"{HOME}/notes.txt", False),
    ("file-read", f"{HOME}/.pyenv/shims/python", True),   # toolchains are shown
    ("file-write", f"{HOME}/.pyenv/shims/python", False),
    ("file-read", f"{HOME}/.dsh/patch.yml", False),       # the dsh home never
    ("file-read", f"{HOME}/.dsh/plugins/x.py", False),    # not even a 'readable' path in it
    ("file-read", f"{HOME}/.dsh/.env", False),
    ("file-read", f"{HOME}/src/app/main.py", True),       # the workspace root
    ("file-write", f"{HOME}/src/app/main.py", True),
    ("file-write", f"{HOME}/shared/out.txt", True),       # a granted root
    ("file-read", f"{HOME}/src/app/secrets/key", False),  # a protected path inside it
    ("file-write", f"{HOME}/src/app/secrets/key", False),
    ("file-write", "/private/tmp/scratch", True),         # scratch space
    ("file-write", "/private/var/folders/xy/abc/T/x", True),
    ("file-write", "/private/var/folders/xy/other", False),
])
def test_workspace_write_decisions(operation: str, path: str, allowed: bool) -> None:
    text = seatbelt.profile(**CASES["workspace-write"], **INPUTS)
    assert decide(text, operation, path) is allowed


def test_read_only_keeps_roots_readable_not_writable_and_scratch_writable() -> None:
    text = seatbelt.profile(**CASES["read-only-network"], **INPUTS)
    assert decide(text, "file-read", f"{HOME}/src/app/main.py")
    assert not decide(text, "file-write", f"{HOME}/src/app/main.py")
    assert decide(text, "file-write", "/private/tmp/x")
    assert "(allow network-outbound" in text


def test_no_network_unless_allowed() -> None:
    text = seatbelt.profile(**CASES["workspace-write"], **INPUTS)
    assert "network" not in "".join(line for line in text.splitlines()
                                    if not line.startswith(";"))


def test_a_root_inside_the_dsh_home_is_usable_but_the_home_itself_never() -> None:
    inside = dict(INPUTS, roots=[f"{HOME}/.dsh/workspaces/w1"])
    text = seatbelt.profile(writable=True, network=False, **inside)
    assert decide(text, "file-write", f"{HOME}/.dsh/workspaces/w1/a.txt")
    assert not decide(text, "file-read", f"{HOME}/.dsh/.env")
    same = dict(INPUTS, roots=[f"{HOME}/.dsh"])
    text = seatbelt.profile(writable=True, network=False, **same)
    assert not decide(text, "file-read", f"{HOME}/.dsh/patch.yml")
    assert not decide(text, "file-write", f"{HOME}/.dsh/patch.yml")


def test_quotes_and_backslashes_cannot_break_out_of_a_string() -> None:
    hostile = '/tmp/x"))(allow default)(deny file-read* (subpath "/'
    text = seatbelt.profile(writable=True, network=False, roots=[hostile], hidden=[],
                            readable=[], masked=[], private=[], scratch=[])
    assert "(allow default)" not in text.replace(seatbelt.string(hostile), "")
    assert decide(text, "file-write", hostile + "/f")


def test_wrap_on_macos_runs_sandbox_exec_with_the_layout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "user"
    dsh_home = home / ".dsh"
    work = home / "src" / "app"
    secret = work / "secrets"
    for folder in (dsh_home, work, secret, home / ".cargo" / "bin"):
        folder.mkdir(parents=True)
    (dsh_home / ".env").write_text("TOKEN=x\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(sandbox, "_MACOS", True)
    monkeypatch.setattr(sandbox, "_LINUX", False)
    monkeypatch.setitem(sandbox._PROBES, (seatbelt.SANDBOX_EXEC, False), sandbox.Probe(True))
    policy = sandbox.Policy.from_config({"mode": "workspace-write"})
    env = {"PATH": f"{home}/.cargo/bin{os.pathsep}/usr/bin"}
    argv = sandbox.wrap(policy, ["bash", "-c", "ls"], str(work), workspace=str(work),
                        protected=[str(secret)], home=str(dsh_home), env=env)
    assert argv[:2] == [seatbelt.SANDBOX_EXEC, "-p"] and argv[3:] == ["bash", "-c", "ls"]
    text = argv[2]
    real = os.path.realpath
    assert f'(deny file-read* (subpath "{real(home)}"))' in text
    assert f'(allow file-read* file-write* (subpath "{real(work)}"))' in text
    assert f'(deny file-read* file-write* (subpath "{real(secret)}"))' in text
    assert f'(deny file-read* file-write* (subpath "{real(dsh_home)}"))' in text
    assert f'(allow file-read* (subpath "{real(home / ".cargo")}"))' in text
    assert decide(text, "file-write", f"{real(work)}/new.txt")
    assert not decide(text, "file-read", f"{real(dsh_home)}/.env")


def test_the_platforms_sandbox_is_named() -> None:
    found = sandbox.rung(sandbox.Policy(mode="workspace-write"))
    assert found.name in ("bubblewrap", "landlock", "seatbelt", "none")
    assert (found.name == "seatbelt") == (sys.platform == "darwin" and found.name != "none")
