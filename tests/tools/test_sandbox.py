"""The shell tool's bubblewrap sandbox, with real commands under a real ``bwrap``.

Each refusal the issue names is tried for real: ``touch`` outside the working directory,
``cat`` of a home's ``.env``, a TCP connect to a listener on 127.0.0.1; the verdict is the
command's output *and* the host (no file made, no connection accepted). Where bubblewrap
cannot run here, the sandboxed tests skip naming the missing capability; the unsandboxed
and ``required`` paths are tested anyway, with a stand-in ``bwrap`` that fails its trial
the way one does in a container without user namespaces.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of

from dsh.config.envsnapshot import snapshot
from dsh.core.errors import ConfigError
from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.confine import Boundary
from dsh.runtime.tools.sandbox import Policy, probe, wrap
from dsh.runtime.tools.shell import ShellTools

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell")

USABLE = probe(Policy(mode="workspace-write"))
needs_bwrap = pytest.mark.skipif(not USABLE.usable, reason=f"no usable bubblewrap: "
                                                           f"{USABLE.reason}")
FAILING_BWRAP = """#!/bin/sh
echo 'bwrap: No permissions to creating new namespace, likely because the kernel does not \
allow non-privileged user namespaces.' >&2
exit 1
"""


def shell(home: Path | None = None, **sandbox: Any) -> Any:
    """The bash tool of a shell row with ``sandbox`` config and ``home`` as its dsh home."""
    plugin = make_plugin(ShellTools, sandbox=sandbox)
    assert isinstance(plugin, ShellTools)
    plugin.home = str(home) if home else None
    return tools_of(plugin)["bash"]


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in user home (``HOME``) holding a secret."""
    home = tmp_path / "userhome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def outside() -> Iterator[Path]:
    """A real host folder outside the working directory and outside /tmp."""
    base = "/var/tmp" if os.path.isdir("/var/tmp") else None
    with tempfile.TemporaryDirectory(prefix="dsh-sandbox-", dir=base) as path:
        yield Path(path)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1 that no one has connected to yet."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        server.settimeout(0)
        yield server


def accepted(server: socket.socket) -> bool:
    """Whether a connection is waiting on ``server`` (one is closed again at once)."""
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


# -- sandboxed: the three refusals, and ordinary work still working --------------------------


@needs_bwrap
def test_write_outside_the_working_directory_is_refused(
        ctx: ToolContext, work: Path, outside: Path) -> None:
    bash = shell(mode="workspace-write")
    result = run(bash, ctx, command=f"touch {outside}/escaped; echo rc=$?")
    assert "Read-only file system" in result.text and "rc=1" in result.text, result.text
    assert not (outside / "escaped").exists()
    # A sibling in /tmp lands in the command's private /tmp, never on the host.
    result = run(bash, ctx, command="touch ../sibling && echo made")
    assert "made" in result.text and not (work.parent / "sibling").exists()


@needs_bwrap
def test_home_secrets_are_hidden(ctx: ToolContext, tmp_path: Path, user_home: Path) -> None:
    dsh_home = tmp_path / "dshhome"
    dsh_home.mkdir()
    (dsh_home / ".env").write_text("SANDBOX_SECRET=hunter2\n")
    bash = shell(dsh_home, mode="workspace-write")
    result = run(bash, ctx, command=f"cat {dsh_home}/.env; cat {user_home}/.ssh/id_ed25519; "
                                    "ls -A ~; echo end")
    assert "hunter2" not in result.text and "PRIVATE KEY" not in result.text
    lines = result.text.splitlines()
    assert lines[0].endswith("/dshhome/.env: Permission denied"), result.text
    assert lines[1].endswith("/.ssh/id_ed25519: No such file or directory"), result.text
    assert result.text.endswith("end\n[Command finished with exit code 0]")


@needs_bwrap
def test_toolchains_on_path_in_the_home_stay_runnable(
        tmp_path: Path, user_home: Path, work: Path) -> None:
    """A pyenv-style ``~/.tool/shims`` on PATH shows ``~/.tool`` (what the shim runs), and
    nothing else of the home; switched off, the toolchain is hidden like the rest."""
    tool = user_home / ".tool"
    (tool / "shims").mkdir(parents=True)
    (tool / "versions").mkdir()
    (tool / "versions" / "real").write_text("#!/bin/sh\necho real toolchain\n")
    (tool / "versions" / "real").chmod(0o755)
    (tool / "shims" / "mytool").write_text(f"#!/bin/sh\nexec {tool}/versions/real\n")
    (tool / "shims" / "mytool").chmod(0o755)
    env = {**os.environ, "PATH": f"{tool / 'shims'}{os.pathsep}{os.environ['PATH']}"}
    ctx = ToolContext("s1", env, asyncio.Event(), lambda: str(work), lambda p: p)
    command = f"mytool; cat {user_home}/.ssh/id_ed25519 || echo hidden"
    result = run(shell(mode="workspace-write"), ctx, command=command)
    assert "real toolchain" in result.text and "hidden" in result.text, result.text
    assert "PRIVATE KEY" not in result.text
    result = run(shell(mode="workspace-write", path_toolchains=False), ctx, command=command)
    assert "real toolchain" not in result.text, result.text


@needs_bwrap
def test_hide_covers_more_paths_like_the_homes(ctx: ToolContext, outside: Path) -> None:
    other = outside / "parent-home"  # not under /tmp, which every sandbox replaces
    other.mkdir()
    (other / ".env").write_text("PARENT_SECRET=s3cret\n")
    command = f"cat {other}/.env; ls -A {other}; echo end"
    assert "s3cret" in run(shell(mode="workspace-write"), ctx, command=command).text
    result = run(shell(mode="workspace-write", hide=[str(other)]), ctx, command=command)
    assert "s3cret" not in result.text and "No such file" in result.text, result.text


@needs_bwrap
def test_the_dsh_home_stays_hidden_and_unwritable_when_it_is_the_workspace(
        tmp_path: Path, dsh_home: Path) -> None:
    """The whole dsh home is the workspace here: it is still covered, read-only, so its
    ``.env`` and ``patch.yml`` can be neither read nor written, and the names the ``.env``
    set are gone from the environment, even from bwrap's own ``/proc/1/environ``."""
    (dsh_home / ".env").write_text("SANDBOX_SECRET=hunter2\n")
    (dsh_home / "patch.yml").write_text("[]\n")
    env = snapshot(dsh_home, dsh_home)
    assert env["SANDBOX_SECRET"] == "hunter2"
    ctx = ToolContext("s1", env, asyncio.Event(), lambda: str(dsh_home),
                      lambda path: path)
    bash = shell(dsh_home, mode="workspace-write")
    result = run(bash, ctx, command="cat patch.yml; cat .env; echo x > patch.yml; "
                                    "echo ${SANDBOX_SECRET-unset}; cat /proc/1/environ")
    assert "hunter2" not in result.text and "SANDBOX_SECRET" not in result.text, result.text
    assert "cat: patch.yml: No such file or directory" in result.text, result.text
    assert "Read-only file system" in result.text, result.text
    assert "\nunset\n" in result.text, result.text
    assert (dsh_home / ".env").read_text() == "SANDBOX_SECRET=hunter2\n"
    assert (dsh_home / "patch.yml").read_text() == "[]\n"


@needs_bwrap
def test_a_workspace_kept_in_the_home_is_writable_and_the_rest_of_the_home_is_not(
        dsh_home: Path) -> None:
    (dsh_home / ".env").write_text("SANDBOX_SECRET=hunter2\n")
    (dsh_home / "patch.yml").write_text("[]\n")
    work = dsh_home / "workspaces" / "w"
    work.mkdir(parents=True)
    ctx = ToolContext("s1", {}, asyncio.Event(), lambda: str(work), lambda path: path,
                      boundary=Boundary(str(work), protected=(str(dsh_home),)))
    bash = shell(dsh_home, mode="workspace-write")
    result = run(bash, ctx, command="echo made > f.txt; cat ../../.env; "
                                    "echo x > ../../patch.yml; ls -a ../..")
    assert "hunter2" not in result.text, result.text
    assert "Read-only file system" in result.text, result.text
    assert (work / "f.txt").read_text() == "made\n"
    assert (dsh_home / "patch.yml").read_text() == "[]\n"


@needs_bwrap
def test_network_is_refused_unless_allowed(
        ctx: ToolContext, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    bash = shell(mode="workspace-write")
    result = run(bash, ctx, command=connect)
    assert "Connection refused" in result.text and "connected" not in result.text
    assert result.text.endswith("[Command finished with exit code 1]")
    assert not accepted(listener)
    bash = shell(mode="workspace-write", network=True)
    result = run(bash, ctx, command=connect)
    assert "connected" in result.text, result.text
    assert accepted(listener)


@needs_bwrap
def test_a_build_in_the_working_directory_works(ctx: ToolContext, work: Path) -> None:
    (work / "hello.c").write_text('#include <stdio.h>\nint main(void) {'
                                  ' puts("built and ran"); return 0; }\n')
    (work / "Makefile").write_text("hello: hello.c\n\tcc -o hello hello.c\n")
    bash = shell(mode="workspace-write")
    command = ("command -v make >/dev/null && command -v cc >/dev/null || "
               "{ echo no-toolchain; exit 0; }; make -s && ./hello && mkdir -p out "
               "&& cp hello out/ && echo scratch > $(mktemp)")
    result = run(bash, ctx, command=command)
    if "no-toolchain" in result.text:
        pytest.skip("no make and cc on this machine")
    assert result.text == "built and ran\n[Command finished with exit code 0]", result.text
    assert (work / "out" / "hello").is_file()


@needs_bwrap
def test_read_only_mode_refuses_writes_in_the_working_directory(
        ctx: ToolContext, work: Path) -> None:
    (work / "data.txt").write_text("kept\n")
    bash = shell(mode="read-only")
    result = run(bash, ctx, command="cat data.txt; touch new.txt; echo x > data.txt")
    assert result.text.startswith("kept\n") and "Read-only file system" in result.text
    assert not (work / "new.txt").exists() and (work / "data.txt").read_text() == "kept\n"


@needs_bwrap
def test_the_runtime_is_out_of_reach_and_leftovers_die(ctx: ToolContext) -> None:
    """Its own pid namespace: the sandbox cannot signal the runtime, and a background
    process it leaves dies with it (found by a marker in the host's process table)."""
    bash = shell(mode="workspace-write")
    result = run(bash, ctx, command=f"kill -0 {os.getpid()} || echo unreachable; "
                                    "sleep 987.25 & echo left")
    assert "unreachable" in result.text and "left" in result.text, result.text
    for _ in range(300):
        if not any("987.25" in _cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit()):
            break
        time.sleep(0.01)
    else:
        pytest.fail("the sandboxed background sleep outlived its call")


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


@needs_bwrap
def test_the_workspace_is_writable_from_a_workdir_below_it(
        ctx: ToolContext, work: Path) -> None:
    (work / "sub").mkdir()
    bash = shell(mode="workspace-write")
    result = run(bash, ctx, command="pwd; touch ../top.txt", workdir="sub")
    assert result.text.splitlines()[0] == str(work / "sub"), result.text
    assert (work / "top.txt").exists()


# -- no usable bubblewrap: said plainly, or refused when required ---------------------------


@pytest.fixture
def broken_bwrap(tmp_path: Path) -> str:
    """A ``bwrap`` that fails its trial like one in a container without user namespaces."""
    path = tmp_path / "bin" / "bwrap"
    path.parent.mkdir()
    path.write_text(FAILING_BWRAP)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("kind", ["missing", "broken"])
def test_unusable_and_not_required_runs_unsandboxed_and_says_so(
        ctx: ToolContext, work: Path, broken_bwrap: str, kind: str) -> None:
    bwrap = broken_bwrap if kind == "broken" else str(work / "no-such-bwrap")
    bash = shell(mode="workspace-write", bwrap=bwrap)
    result = run(bash, ctx, command="echo ran > ran.txt; echo out")
    first, *rest = result.text.splitlines()
    assert first.startswith("[Not sandboxed: ") and first.endswith(
        "; this command ran without the workspace-write sandbox]"), first
    assert ("user namespaces" in first) if kind == "broken" else ("was not found" in first)
    assert rest == ["out", "[Command finished with exit code 0]"]
    assert (work / "ran.txt").read_text() == "ran\n"


@pytest.mark.parametrize("mode", ["workspace-write", "read-only"])
def test_unusable_and_required_refuses_every_command(
        ctx: ToolContext, work: Path, broken_bwrap: str, mode: str) -> None:
    bash = shell(mode=mode, required=True, bwrap=broken_bwrap)
    result = run(bash, ctx, command="echo ran > ran.txt")
    assert result.is_error
    assert result.text.startswith(f"Refused: this profile requires the {mode} sandbox")
    assert "The command was not run." in result.text and "user namespaces" in result.text
    assert not (work / "ran.txt").exists()


def test_off_runs_plain_and_says_nothing(ctx: ToolContext, broken_bwrap: str) -> None:
    bash = shell(mode="off", bwrap=broken_bwrap)
    assert run(bash, ctx, command="echo hi").text == "hi\n[Command finished with exit code 0]"
    assert "sandbox" not in bash.description


def test_required_with_mode_off_is_a_config_error() -> None:
    plugin = make_plugin(ShellTools, sandbox={"mode": "off", "required": True})
    with pytest.raises(ConfigError, match=r"row 'row' config\.sandbox\.required: true needs"):
        tools_of(plugin)


def test_bad_sandbox_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"config\.sandbox\.mode: expected one of"):
        make_plugin(ShellTools, sandbox={"mode": "strict"})
    with pytest.raises(ConfigError, match=r"config\.sandbox\.readable\[0\]: expected an abs"):
        Policy.from_config({"mode": "read-only", "readable": ["relative/dir"]})


def test_the_description_tells_the_model_the_policy() -> None:
    bash = shell(mode="workspace-write")
    assert ("only the working directory and a private /tmp are writable, the home directory "
            "is hidden, and there is no network access") in bash.description
    bash = shell(mode="read-only", network=True)
    assert "nothing is writable but a private /tmp" in bash.description
    assert "network access is allowed" in bash.description


def test_mounts_let_the_deeper_of_home_and_workspace_win(tmp_path: Path) -> None:
    """Pure argv check: with the workspace inside the hidden home it is bound after the
    cover; with the dsh home inside the workspace, the cover comes after the bind."""
    if not USABLE.usable:
        pytest.skip(f"no usable bubblewrap: {USABLE.reason}")
    home = tmp_path / "dshhome"
    inner = home / "workspaces" / "w1"
    inner.mkdir(parents=True)
    argv = wrap(Policy(mode="workspace-write"), ["sh", "-c", ":"], str(inner), home=str(home))
    assert argv.index("--tmpfs") < argv.index(str(home)) < argv.index(str(inner))
    argv = wrap(Policy(mode="workspace-write"), ["sh", "-c", ":"], str(tmp_path),
                home=str(home))
    assert argv.index(str(tmp_path)) < argv.index(str(home))
    assert argv[argv.index(str(home)) - 1] == "--tmpfs"
