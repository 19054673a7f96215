"""How ``dsh chat`` (and ``dsh`` alone) start, and when they refuse.

* Without a terminal, bare ``dsh`` does what it did before the chat existed: the
  launcher's usage on stderr, nothing on stdout, exit 2 (``tests/snapshots/bare-dsh.stderr``
  pins the bytes; the usage itself now names ``dsh chat``).
* ``dsh chat`` without a terminal says what to use instead, in one line, exit 2; without
  the chat extra it names the install command, exit 2.
* The chat profile a chat spawns through the SDK serves the protocol (``DSH_SERVE``), with
  the interactive defaults (policy ``ask``, live reload).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsh.cli.main import SERVE_ENV
from dsh.sdk import ClientConfig, DshClient
from dsh.sdk._launch import SERVE_ENV as SDK_SERVE_ENV

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "bare-dsh.stderr"
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX ptys")


def dsh(*args: str, stdin: int | None = subprocess.DEVNULL,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    environ = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "dsh", *args], stdin=stdin,
                          capture_output=True, env=environ, timeout=120)


def test_bare_dsh_without_a_terminal_is_unchanged() -> None:
    done = dsh()
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr == SNAPSHOT.read_bytes()


def test_bare_dsh_with_only_stdin_a_terminal_is_unchanged() -> None:
    main, other = os.openpty()
    try:
        done = dsh(stdin=other)
    finally:
        os.close(main)
        os.close(other)
    assert (done.returncode, done.stdout, done.stderr) == (2, b"", SNAPSHOT.read_bytes())


def test_chat_without_a_terminal_says_what_to_use_instead() -> None:
    done = dsh("chat")
    assert done.returncode == 2 and done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1
    assert "needs a terminal" in lines[0] and "dsh headless" in lines[0] and "SDK" in lines[0]
    piped = subprocess.run([sys.executable, "-m", "dsh", "chat"], input=b"hello\n",
                           capture_output=True, timeout=120)
    assert piped.returncode == 2 and b"needs a terminal" in piped.stderr


def test_chat_help_and_bad_options() -> None:
    shown = dsh("chat", "-h")
    assert shown.returncode == 0 and shown.stdout.startswith(b"usage: dsh chat")
    bad = dsh("chat", "--bogus")
    assert bad.returncode == 2
    assert bad.stderr.decode() == ("dsh: error: dsh chat: unknown option '--bogus' "
                                   "(see `dsh chat -h`)\n")
    both = dsh("chat", "--continue", "--resume", "x")
    assert both.returncode == 2 and b"cannot be combined" in both.stderr


def test_the_missing_extra_is_named_in_one_line() -> None:
    pexpect = pytest.importorskip("pexpect")
    code = ("import sys; sys.modules['textual'] = None; from dsh.cli.main import main; "
            "main(['chat'])")
    child = pexpect.spawn(sys.executable, ["-c", code], env={**os.environ},
                          dimensions=(24, 80), timeout=60)
    child.expect(pexpect.EOF)
    child.close()
    said = child.before.decode().strip().splitlines()
    assert child.exitstatus == 2
    assert len(said) == 1
    assert "pip install 'dsh-harness[chat]'" in said[0] and "textual" in said[0]


def test_an_sdk_client_of_the_chat_profile_gets_its_server(dsh_home: Path) -> None:
    assert SERVE_ENV == SDK_SERVE_ENV  # the launcher reads what the SDK sets
    with DshClient(ClientConfig(profile="chat", dsh_home=dsh_home)) as client:
        assert client.server_info["profile"] == {"name": "chat", "patchReload": "live"}
        session = client.new_session()
        assert session.settings()["policyDefault"] == "ask"
        # the runtime took the marker out of its environment: its tools never see it
        ran = session.shell("echo ${DSH_SERVE:-unset}")
        assert ran["output"].startswith("unset")


def test_the_chat_profile_serves_when_told_to(dsh_home: Path) -> None:
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"cwd": os.getcwd()}}) + "\n"
    done = subprocess.run([sys.executable, "-m", "dsh", "chat"], input=request.encode(),
                          capture_output=True, timeout=120, env={**os.environ,
                                                                 SERVE_ENV: "sdk"})
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["result"]["serverInfo"]["name"] == "dsh-sdk-runtime"
    assert done.returncode == 0


def test_bare_dsh_on_a_terminal_opens_the_chat(tmp_path: Path, dsh_home: Path) -> None:
    pytest.importorskip("textual")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from chatkit import Terminal

    terminal = Terminal([], cwd=Path.cwd(), env={"DSH_HOME": str(dsh_home)})
    try:
        terminal.wait_for("profile chat")
        terminal.key("\x04")
        assert terminal.exit_code() == 0
    finally:
        terminal.close()


def test_the_frozen_runtime_leaves_the_chat_ui_out() -> None:
    """Every module of dsh.chat but its launch checks (and their options) is excluded
    from the freeze: the
    chat runs in the user's Python, and the frozen runtime (15 MB at most) carries no UI."""
    import importlib.util
    import pkgutil

    import dsh.chat

    spec = importlib.util.spec_from_file_location(
        "hatch_build", Path(__file__).resolve().parents[2] / "wheels" / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    sys.modules["hatch_build"] = hook
    try:
        spec.loader.exec_module(hook)
    except ImportError as exc:  # the hook imports hatchling
        pytest.skip(f"the build hook needs {exc.name}")
    finally:
        sys.modules.pop("hatch_build", None)
    ui = {f"dsh.chat.{m.name}" for m in pkgutil.iter_modules(dsh.chat.__path__)} - {
        "dsh.chat.launch", "dsh.chat.options"}
    assert ui <= set(hook.EXCLUDED_MODULES)
    assert "textual" in hook.EXCLUDED_MODULES
