"""The shell tool's sandbox, with real commands on each rung: bubblewrap and Landlock.

Each refusal the issue names is tried for real: ``touch`` outside the working directory,
``cat`` of a home's ``.env``, a TCP connect to a listener on 127.0.0.1; the verdict is the
command's output *and* the host (no file made, no connection accepted). Every sandboxed
test runs twice: under the real ``bwrap``, and under Landlock with seccomp, selected the
way a container selects it, by a ``bwrap`` early on ``PATH`` that fails as Docker's does
(``tests/fixtures/sandboxrungs.py``; the other two ways, no ``bwrap`` at all and a seccomp
filter that refuses namespaces, are driven through real runtimes in
``test_sandbox_process.py`` and ``tests/security/test_landlock_rung.py``). Where a rung
cannot run here its tests skip naming why; with no rung at all (Landlock's syscalls
refused too), commands run unsandboxed and say so, or are refused when required: tested
through ``dsh sandbox`` under that filter.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of
from sandboxrungs import arrange, skip_reason

from dsh.config.envsnapshot import snapshot
from dsh.core import process
from dsh.core.errors import ConfigError
from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.confine import Boundary
from dsh.runtime.tools.sandbox import Policy, probe, wrap
from dsh.runtime.tools.shell import ShellTools

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell")

USABLE = probe(Policy(mode="workspace-write"))
RUNGS = ("bubblewrap", "landlock")
FAILING_BWRAP = """#!/bin/sh
echo 'bwrap: No permissions to creating new namespace, likely because the kernel does not \
allow non-privileged user namespaces.' >&2
exit 1
"""


@pytest.fixture(params=RUNGS)
def rung(request: pytest.FixtureRequest, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> str:
    """The rung the test's commands run on: the machine's bubblewrap, or Landlock with
    seccomp where ``bwrap`` fails as in Docker (a stand-in early on ``PATH``)."""
    way = "bubblewrap" if request.param == "bubblewrap" else "landlock-docker-bwrap"
    if why := skip_reason(way):
        pytest.skip(why)
    for name, value in arrange(way, tmp_path).env.items():
        monkeypatch.setenv(name, value)
    return request.param


def refused(rung: str, what: str) -> str:
    """How a refused ``what`` (``write``, ``read``, ``hidden``) reads on ``rung``: bubblewrap
    shows a read-only or empty filesystem, Landlock answers EACCES."""
    if rung == "landlock":
        return "Permission denied"
    return {"write": "Read-only file system", "read": "Permission denied",
            "hidden": "No such file or directory"}[what]


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


def test_write_outside_the_working_directory_is_refused(
        rung: str, ctx: ToolContext, work: Path, outside: Path) -> None:
    bash = shell(mode="workspace-write")
    result = run(bash, ctx, command=f"touch {outside}/escaped; echo rc=$?")
    assert refused(rung, "write") in result.text and "rc=1" in result.text, result.text
    assert not (outside / "escaped").exists()
    # A sibling in /tmp lands in bubblewrap's private /tmp; Landlock refuses it.
    result = run(bash, ctx, command="touch ../sibling && echo made")
    assert ("made" in result.text) == (rung == "bubblewrap"), result.text
    assert not (work.parent / "sibling").exists()


def test_home_secrets_are_hidden(rung: str, ctx: ToolContext, tmp_path: Path,
                                 user_home: Path) -> None:
    dsh_home = tmp_path / "dshhome"
    dsh_home.mkdir()
    (dsh_home / ".env").write_text("SANDBOX_SECRET=hunter2\n")
    bash = shell(dsh_home, mode="workspace-write")
    result = run(bash, ctx, command=f"cat {dsh_home}/.env; cat {user_home}/.ssh/id_ed25519; "
                                    "ls -A ~; echo end")
    assert "hunter2" not in result.text and "PRIVATE KEY" not in result.text
    lines = result.text.splitlines()
    assert lines[0].endswith("/dshhome/.env: Permission denied"), result.text
    assert lines[1].endswith(f"/.ssh/id_ed25519: {refused(rung, 'hidden')}"), result.text
    assert result.text.endswith("end\n[Command finished with exit code 0]")


def test_toolchains_on_path_in_the_home_stay_runnable(
        rung: str, tmp_path: Path, user_home: Path, work: Path) -> None:
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


def test_hide_covers_more_paths_like_the_homes(
        rung: str, ctx: ToolContext, outside: Path) -> None:
    other = outside / "parent-home"  # not under /tmp, which every sandbox replaces
    other.mkdir()
    (other / ".env").write_text("PARENT_SECRET=s3cret\n")
    command = f"cat {other}/.env; ls -A {other}; echo end"
    assert "s3cret" in run(shell(mode="workspace-write"), ctx, command=command).text
    result = run(shell(mode="workspace-write", hide=[str(other)]), ctx, command=command)
    assert "s3cret" not in result.text and refused(rung, "hidden") in result.text, result.text


def test_the_dsh_home_stays_hidden_and_unwritable_when_it_is_the_workspace(
        rung: str, tmp_path: Path, dsh_home: Path) -> None:
    """The whole dsh home is the workspace here: it is still covered, read-only, so its
    ``.env`` and ``patch.yml`` can be neither read nor written, and the names the ``.env``
    set are gone from the environment, even from bwrap's own ``/proc/1/environ``. Landlock
    grants nothing of it (and says so), and the host's pid 1 is out of its reach."""
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
    assert f"cat: patch.yml: {refused(rung, 'hidden')}" in result.text, result.text
    assert refused(rung, "write") in result.text, result.text
    assert "\nunset\n" in result.text, result.text
    if rung == "landlock":
        assert result.text.startswith("[Sandbox: the workspace root "), result.text
    assert (dsh_home / ".env").read_text() == "SANDBOX_SECRET=hunter2\n"
    assert (dsh_home / "patch.yml").read_text() == "[]\n"


def test_a_workspace_kept_in_the_home_is_writable_and_the_rest_of_the_home_is_not(
        rung: str, dsh_home: Path) -> None:
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
    assert refused(rung, "write") in result.text, result.text
    assert (work / "f.txt").read_text() == "made\n"
    assert (dsh_home / "patch.yml").read_text() == "[]\n"


def test_a_protected_folder_inside_the_workspace_stays_out_of_reach(
        rung: str, tmp_path: Path) -> None:
    """The dsh home inside the workspace: bubblewrap covers it again; Landlock cannot take
    it back out of a granted root, so it grants the root around it, and says so."""
    work = tmp_path / "project"
    home = work / "dsh-home"
    home.mkdir(parents=True)
    (home / ".env").write_text("SANDBOX_SECRET=hunter2\n")
    (work / "src").mkdir()
    ctx = ToolContext("s1", {}, asyncio.Event(), lambda: str(work), lambda path: path,
                      boundary=Boundary(str(work), protected=(str(home),)))
    bash = shell(home, mode="workspace-write")
    result = run(bash, ctx, command="cat dsh-home/.env; echo x > dsh-home/new; "
                                    "echo ok > src/made && cat src/made")
    assert "hunter2" not in result.text and not (home / "new").exists(), result.text
    assert "ok\n" in result.text and (work / "src" / "made").exists(), result.text
    if rung == "landlock":
        first = result.text.splitlines()[0]
        assert first.startswith(f"[Sandbox: Landlock cannot take {home} back out of the "
                                f"workspace root {work}"), result.text


def test_network_is_refused_unless_allowed(
        rung: str, ctx: ToolContext, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    bash = shell(mode="workspace-write")
    result = run(bash, ctx, command=connect)
    denied = "Connection refused" if rung == "bubblewrap" else "Permission denied"
    assert denied in result.text and "connected" not in result.text, result.text
    assert result.text.endswith("[Command finished with exit code 1]")
    assert not accepted(listener)
    bash = shell(mode="workspace-write", network=True)
    result = run(bash, ctx, command=connect)
    assert "connected" in result.text, result.text
    assert accepted(listener)


def test_a_build_in_the_working_directory_works(
        rung: str, ctx: ToolContext, work: Path) -> None:
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


def test_read_only_mode_refuses_writes_in_the_working_directory(
        rung: str, ctx: ToolContext, work: Path) -> None:
    (work / "data.txt").write_text("kept\n")
    bash = shell(mode="read-only")
    result = run(bash, ctx, command="cat data.txt; touch new.txt; echo x > data.txt")
    assert result.text.startswith("kept\n") and refused(rung, "write") in result.text
    assert not (work / "new.txt").exists() and (work / "data.txt").read_text() == "kept\n"


def test_the_runtime_is_out_of_reach_and_leftovers_die(rung: str, ctx: ToolContext) -> None:
    """Bubblewrap's own pid namespace, Landlock's signal scope (ABI 6): the sandbox cannot
    signal the runtime, and a background process it leaves dies with it (found by a
    marker in the host's process table)."""
    from dsh.core import landlock

    if rung == "landlock" and landlock.abi() < 6:
        pytest.skip(f"Landlock ABI {landlock.abi()} does not scope signals (ABI 6 does)")
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


def test_the_workspace_is_writable_from_a_workdir_below_it(
        rung: str, ctx: ToolContext, work: Path) -> None:
    (work / "sub").mkdir()
    bash = shell(mode="workspace-write")
    result = run(bash, ctx, command="pwd; touch ../top.txt", workdir="sub")
    assert result.text.splitlines()[0] == str(work / "sub"), result.text
    assert (work / "top.txt").exists()


# -- the network allow-list ------------------------------------------------------------------


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.server_address[1]}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def web() -> Iterator[tuple[int, int]]:
    """Two HTTP servers on 127.0.0.1: ``(named, unnamed)`` ports."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield servers[0].server_address[1], servers[1].server_address[1]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


# Plain bash speaking HTTP to $HTTP_PROXY (no curl needed): one request, the whole answer.
THROUGH_PROXY = (r"p=${HTTP_PROXY#http://}; exec 3<>/dev/tcp/${p%:*}/${p##*:} || exit 9; "
                 r"""printf '%s\r\nHost: h\r\n\r\n' "$1" >&3; cat <&3; exec 3>&-""")


def through_proxy(*requests: str) -> str:
    """A command sending each request line to the proxy, one connection each."""
    calls = "; echo; ".join(f"go '{line}'" for line in requests)
    return f"go() {{ {THROUGH_PROXY}; }}; {calls}"


def test_the_allow_list_lets_named_hosts_through_the_proxy_and_refuses_the_rest(
        rung: str, ctx: ToolContext, web: tuple[int, int]) -> None:
    named, unnamed = web
    bash = shell(mode="workspace-write", network=[f"127.0.0.1:{named}", "pypi.org"])
    result = run(bash, ctx, command=through_proxy(
        f"GET http://127.0.0.1:{named}/ HTTP/1.1",
        f"GET http://127.0.0.1:{unnamed}/ HTTP/1.1",
        f"CONNECT 127.0.0.1:{unnamed} HTTP/1.1") + "; env | grep -ci no_proxy")
    text = result.text
    assert f"hello from {named}" in text and f"hello from {unnamed}" not in text, text
    assert text.count("HTTP/1.1 403 Forbidden") == 2, text
    assert (f"dsh sandbox: connection to 127.0.0.1:{unnamed} refused: not allowed by row "
            f"'row' config.sandbox.network; add 127.0.0.1 (any port) or "
            f"127.0.0.1:{unnamed} there to allow it") in text, text
    assert (f"[Network: the sandbox refused 127.0.0.1:{unnamed} (not in row 'row' "
            "config.sandbox.network; add a host there to allow it)]\n[Command finished"
            ) in text, text
    assert "\n0\n" in text  # NO_PROXY and no_proxy are gone


def test_the_allow_list_tunnels_connect_to_a_named_host(
        rung: str, ctx: ToolContext, web: tuple[int, int]) -> None:
    named, _ = web
    tunnel = (r"p=${HTTP_PROXY#http://}; exec 3<>/dev/tcp/${p%:*}/${p##*:}; "
              rf"printf 'CONNECT 127.0.0.1:{named} HTTP/1.1\r\n\r\n' >&3; "
              r"""read -r status <&3; read -r blank <&3; echo "$status"; """
              r"printf 'GET / HTTP/1.0\r\n\r\n' >&3; cat <&3")
    bash = shell(mode="workspace-write", network=[f"127.0.0.1:{named}"])
    result = run(bash, ctx, command=tunnel)
    assert "200 Connection established" in result.text, result.text
    assert f"hello from {named}" in result.text, result.text
    assert "[Network:" not in result.text


def test_around_the_proxy_nothing_gets_out(
        rung: str, ctx: ToolContext, web: tuple[int, int]) -> None:
    """A plain ``connect()`` to the named host's port, a UDP socket (DNS), another port of
    127.0.0.1: each refused (Landlock: TCP to the proxy's port only, seccomp no UDP;
    bubblewrap: a network of its own with nothing in it but the relay)."""
    named, unnamed = web
    bash = shell(mode="workspace-write", network=[f"127.0.0.1:{named}"])
    result = run(bash, ctx, command=(
        f"(exec 3<>/dev/tcp/127.0.0.1/{named}) 2>&1 | tail -1; "
        f"(exec 3<>/dev/tcp/127.0.0.1/{unnamed}) 2>&1 | tail -1; "
        "(exec 3<>/dev/udp/127.0.0.53/53 && echo dns >&3 && echo sent) 2>&1 | tail -1"))
    lines = result.text.splitlines()
    denied = "Permission denied" if rung == "landlock" else "Connection refused"
    assert denied in lines[0] and denied in lines[1], result.text
    assert "sent" not in lines[2] or rung == "bubblewrap", result.text
    if rung == "landlock":
        assert "Permission denied" in lines[2], result.text


def test_a_bad_allow_list_entry_is_a_config_error_naming_it() -> None:
    for entry, problem in (("https://pypi.org", "a host, not a URL"),
                           ("pypi org", "only letters, digits"),
                           ("pypi.org:99999", "a port is a number"),
                           ("::1", "an IPv6 address goes in brackets"),
                           ("", "it is empty")):
        with pytest.raises(ConfigError) as caught:
            tools_of(make_plugin(ShellTools, sandbox={"mode": "workspace-write",
                                                      "network": ["pypi.org", entry]}))
        message = str(caught.value)
        assert message.startswith("row 'row' config.sandbox.network[1]: ") \
            and problem in message and "\n" not in message, message
    policy = Policy.from_config({"mode": "workspace-write", "network": [
        "PyPI.org", "*.npmjs.org", "10.0.0.5:8080", "[::1]:3000", "localhost"]})
    assert policy.hosts == ("pypi.org", "*.npmjs.org", "10.0.0.5:8080", "[::1]:3000",
                            "localhost")
    assert Policy.from_config({"mode": "workspace-write", "network": []}).network is False


# -- no rung at all: said plainly, or refused when required -----------------------------------


@pytest.fixture
def broken_bwrap(tmp_path: Path) -> str:
    """A ``bwrap`` that fails its trial like one in a container without user namespaces."""
    path = tmp_path / "bin" / "bwrap"
    path.parent.mkdir()
    path.write_text(FAILING_BWRAP)
    path.chmod(0o755)
    return str(path)


def sandbox_cli(tmp_path: Path, work: Path, *command: str, way: str = "none",
                **sandbox: Any) -> subprocess.CompletedProcess[str]:
    """``dsh sandbox`` on the sdk profile with ``sandbox`` merged into its shell row, in
    ``work``, started the ``way`` of ``sandboxrungs`` (default: no rung left)."""
    patch = tmp_path / "sandbox-patch.yml"
    patch.write_text(json.dumps([{"id": "tools:shell", "merge": {"config": {
        "sandbox": sandbox}}}]))
    arranged = arrange(way, tmp_path)
    env = {**os.environ, **arranged.env}
    return subprocess.run([*arranged.wrapper, sys.executable, "-m", "dsh", "sandbox",
                           "--patch", str(patch), "--", *command],
                          cwd=work, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the ladder is Linux's")
def test_no_rung_and_not_required_runs_unsandboxed_and_says_so(
        tmp_path: Path, work: Path) -> None:
    done = sandbox_cli(tmp_path, work, "sh", "-c", "echo ran > ran.txt; echo out",
                       mode="workspace-write")
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert len(notes) == 1 and notes[0].startswith("[Not sandboxed: bwrap cannot create its "
                                                   "sandbox here (bwrap: Creating new "
                                                   "namespace failed"), done.stderr
    assert "and Landlock cannot run here: the kernel has no Landlock" in notes[0]
    assert notes[0].endswith("; this command ran without the workspace-write sandbox]")
    assert "dsh sandbox: rung none (no sandbox; " in done.stderr, done.stderr
    assert done.stdout == "out\n"
    assert (work / "ran.txt").read_text() == "ran\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the ladder is Linux's")
@pytest.mark.parametrize("mode", ["workspace-write", "read-only"])
def test_no_rung_and_required_refuses_every_command(
        tmp_path: Path, work: Path, mode: str) -> None:
    done = sandbox_cli(tmp_path, work, "sh", "-c", "echo ran > ran.txt", mode=mode,
                       required=True)
    assert done.returncode == 126, done.stderr
    assert done.stderr.startswith(f"dsh: error: Refused: this profile requires the {mode} "
                                  "sandbox"), done.stderr
    assert "The command was not run." in done.stderr and "Landlock" in done.stderr
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


def test_the_description_tells_the_model_the_policy_and_the_rung(rung: str) -> None:
    bash = shell(mode="workspace-write")
    if rung == "bubblewrap":
        assert bash.description.endswith(
            "Commands run in a sandbox (bubblewrap): only the working directory and a "
            "private /tmp are writable, the home directory is hidden, and there is no "
            "network access; a refused write or connection fails inside the command.")
    else:
        assert "Commands run in a sandbox (Landlock ABI " in bash.description
        assert ("with seccomp): only the working directory and a private temporary "
                "directory ($TMPDIR; /tmp itself is not writable) are writable, the home "
                "directory is unreadable, and there is no network access") in bash.description
    bash = shell(mode="read-only", network=True)
    assert "nothing is writable but a private " in bash.description
    assert "network access is allowed" in bash.description
    bash = shell(mode="workspace-write", network=["pypi.org", "*.npmjs.org"])
    assert ("network access goes only to pypi.org, *.npmjs.org, through the proxy in "
            "HTTP_PROXY/HTTPS_PROXY") in bash.description


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


def test_an_old_landlock_cannot_keep_an_allow_list_so_the_command_gets_no_network(
        ctx: ToolContext, work: Path, web: tuple[int, int]) -> None:
    """Landlock before ABI 4 has no TCP rules: a ruleset made at ABI 3 (this kernel takes
    older rulesets), so no proxy port can be singled out; the command then has no network
    at all, its result says why, and ``dsh doctor`` warns."""
    from dsh.core import landlock
    from dsh.runtime.tools import confined
    from dsh.runtime.tools.sandbox import LANDLOCK, Rung

    if why := skip_reason("landlock-no-bwrap"):
        pytest.skip(why)
    named, _ = web
    policy = Policy(mode="workspace-write", network=(f"127.0.0.1:{named}",))
    old = Rung(LANDLOCK, "bubblewrap is missing", 3)

    async def scenario() -> tuple[str, list[str]]:
        command = await confined._landlock_command(
            policy, old, ["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{named} && echo in"],
            str(work), workspace=str(work), writable=(), protected=(), home=None,
            env=dict(os.environ))
        try:
            assert command.proxy is None and "HTTP_PROXY" not in (command.env or {})
            assert command.confine is not None and command.confine.level == 3
            done = await asyncio.to_thread(process.run, command.argv, cwd=str(work),
                                           env=command.env, confine=command.confine,
                                           text=True, timeout=30)
            return done.stdout + done.stderr, command.notes
        finally:
            await command.close()

    output, notes = asyncio.run(scenario())
    assert "Permission denied" in output and "in\n" not in output, output
    assert notes == ["[Sandbox: this kernel's Landlock (ABI 3) has no TCP rules, so the "
                     "network allow-list cannot be kept: this command had no network]"]
    assert any("allow-list cannot be kept" in gap for gap in old.gaps(policy))
    assert landlock.handled(3)[1] == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap's trial: Linux")
def test_the_rung_is_tried_once_while_the_runtime_loads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The shell row starts its rung's trial when it is applied (``prewarm``), and whoever
    asks for the rung meanwhile (the first ``tools/list``, naming it in the description)
    waits for that trial instead of running one of its own."""
    from dsh.runtime.tools import bubblewrap, sandbox

    started, release = threading.Event(), threading.Event()
    calls: list[tuple[str, bool]] = []

    def slow_trial(exe: str, network: bool) -> tuple[bool, str]:
        calls.append((exe, network))
        started.set()
        release.wait(10)
        return False, "a trial that says no"

    monkeypatch.setattr(sandbox, "_PROBES", {})
    monkeypatch.setattr(sandbox, "_LANDLOCK_TRIAL", [sandbox.Probe(False, "not here")])
    monkeypatch.setattr(bubblewrap, "trial", slow_trial)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: f"/usr/bin/{name}")
    policy = Policy.from_config({"mode": "workspace-write"})
    sandbox.prewarm(policy)
    assert started.wait(10)  # the trial runs in its own thread
    asked: list[sandbox.Rung] = []
    asker = threading.Thread(target=lambda: asked.append(sandbox.rung(policy)))
    asker.start()
    asker.join(0.2)
    assert asker.is_alive() and not asked  # waiting for the trial in flight
    release.set()
    asker.join(10)
    assert [r.name for r in asked] == ["none"]
    assert calls == [("/usr/bin/bwrap", False)]  # one trial for both
