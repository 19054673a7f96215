"""An ACP client that offers its own files and terminal: the ``agent-client-protocol``
package's client, advertising ``fs.readTextFile``, ``fs.writeTextFile`` and ``terminal``,
against the real ``dsh --profile acp`` with the scripted model.

The client here is an editor in miniature (:class:`Editor`): its buffers hold unsaved
text that differs from the disk, writes land in its buffers (never on disk), and its
terminals run, as real processes, exactly the argv dsh sends. So what the model read,
what was written and what ran are each checked against what only the client could have
done. Malformed permission answers are sent over raw pipes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from acpkit import OFFLINE_PATCH, RawAcp, Recorder, acp_client, write_patch

acp = pytest.importorskip("acp")

pytestmark = pytest.mark.skipif(not OFFLINE_PATCH.exists(), reason=f"missing {OFFLINE_PATCH}")


class Editor(Recorder):
    """A client with buffers and terminals; every fs and terminal request is recorded."""

    def __init__(self, answer: str = "allow_once",
                 buffers: dict[str, str] | None = None) -> None:
        super().__init__(answer)
        self.buffers = dict(buffers or {})
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.terminals: dict[str, dict[str, Any]] = {}

    async def read_text_file(self, session_id: str, path: str, line: int | None = None,
                             limit: int | None = None, **kwargs: Any) -> Any:
        from acp.schema import ReadTextFileResponse

        self.calls.append(("fs/read_text_file", {"path": path}))
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        return ReadTextFileResponse(content=Path(path).read_text())

    async def write_text_file(self, session_id: str, path: str, content: str,
                              **kwargs: Any) -> Any:
        self.calls.append(("fs/write_text_file", {"path": path, "content": content}))
        self.buffers[path] = content  # an editor's buffer: not saved to disk

    async def create_terminal(self, session_id: str, command: str,
                              args: list[str] | None = None, env: Any = None,
                              cwd: str | None = None, output_byte_limit: int | None = None,
                              **kwargs: Any) -> Any:
        from acp.schema import CreateTerminalResponse

        argv = [command, *(args or [])]
        self.calls.append(("terminal/create", {"argv": argv, "cwd": cwd,
                                               "outputByteLimit": output_byte_limit}))
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT)
        terminal_id = f"term-{len(self.terminals) + 1}"
        record: dict[str, Any] = {"proc": proc, "output": b""}

        async def pump() -> None:
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(65536):
                record["output"] += chunk

        record["pump"] = asyncio.ensure_future(pump())
        self.terminals[terminal_id] = record
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str,
                                     **kwargs: Any) -> Any:
        from acp.schema import WaitForTerminalExitResponse

        self.calls.append(("terminal/wait_for_exit", {"terminalId": terminal_id}))
        record = self.terminals[terminal_id]
        code = await record["proc"].wait()
        await record["pump"]
        return WaitForTerminalExitResponse(exit_code=code if code >= 0 else None,
                                           signal=None if code >= 0 else "SIGKILL")

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        from acp.schema import TerminalExitStatus, TerminalOutputResponse

        self.calls.append(("terminal/output", {"terminalId": terminal_id}))
        record = self.terminals[terminal_id]
        proc = record["proc"]
        if proc.returncode is not None:
            await record["pump"]
        status = None if proc.returncode is None else TerminalExitStatus(
            exit_code=proc.returncode if proc.returncode >= 0 else None,
            signal=None if proc.returncode >= 0 else "SIGTERM")
        return TerminalOutputResponse(output=record["output"].decode("utf-8", "replace"),
                                      truncated=False, exit_status=status)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        self.calls.append(("terminal/kill", {"terminalId": terminal_id}))
        proc = self.terminals[terminal_id]["proc"]
        if proc.returncode is None:
            proc.terminate()  # dsh sandbox stops the command's whole group
            await proc.wait()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        self.calls.append(("terminal/release", {"terminalId": terminal_id}))
        proc = self.terminals[terminal_id]["proc"]
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]


EVERYTHING = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}


async def start(conn: Any, caps: dict[str, Any] | None = EVERYTHING,
                cwd: str | None = None) -> str:
    from acp.schema import ClientCapabilities

    advertised = None if caps is None else ClientCapabilities.model_validate(caps)
    await conn.initialize(protocol_version=1, client_capabilities=advertised)
    session = await conn.new_session(cwd=cwd or os.getcwd(), mcp_servers=[])
    return str(session.session_id)


def run_prompt(editor: Editor, tmp_path: Path, script: list[dict[str, Any]],
               caps: dict[str, Any] | None = EVERYTHING, mode: str = "workspace",
               cwd: str | None = None) -> str:
    patch = write_patch(tmp_path, script, mode=mode)

    async def main() -> str:
        async with acp_client(editor, tmp_path, patch) as conn:
            session_id = await start(conn, caps, cwd)
            answer = await asyncio.wait_for(
                conn.prompt(session_id=session_id, prompt=[acp.text_block("go")]), 120)
            return str(answer.stop_reason)

    return asyncio.run(main())


def results(editor: Editor) -> list[str]:
    """The text of every finished tool call, in order."""
    return ["".join(c.content.text for c in u.content if getattr(c, "type", "") == "content")
            for u in editor.of("tool_call_update") if u.status in ("completed", "failed")]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


# -- files ----------------------------------------------------------------------------------

def test_files_go_through_the_client_after_the_same_checks(tmp_path: Path,
                                                           dsh_home: Path) -> None:
    """read_file sees the unsaved buffer, edit_file edits it, write_file writes through the
    client; a path outside the root still asks (refused here) and the dsh home is never
    reached: neither is sent to the client."""
    cwd = Path.cwd()
    notes = cwd / "notes.txt"
    notes.write_text("saved line\n")
    (tmp_path / "outside.txt").write_text("outside\n")
    editor = Editor("reject_once", buffers={str(notes): "unsaved line\nsecond line\n"})
    script = [
        call("read_file", path="notes.txt"),
        call("edit_file", path="notes.txt", old_string="unsaved", new_string="edited"),
        call("write_file", path="out.txt", content="written by the model\n"),
        call("read_file", path="../outside.txt"),
        call("read_file", path=str(dsh_home / "patch.yml")),
        {"text": "done"},
    ]
    assert run_prompt(editor, tmp_path, script) == "end_turn"
    read, edited, written, outside, home = results(editor)
    assert read == "     1\tunsaved line\n     2\tsecond line"
    assert edited == "Edited notes.txt: replaced 1 occurrence."
    assert written == "Created out.txt (21 bytes)."
    assert "denied" in outside
    assert "protected" in home or "dsh home" in home, home
    real = os.path.realpath(cwd)
    assert editor.calls == [
        ("fs/read_text_file", {"path": f"{real}/notes.txt"}),
        ("fs/read_text_file", {"path": f"{real}/notes.txt"}),
        ("fs/write_text_file", {"path": f"{real}/notes.txt",
                                "content": "edited line\nsecond line\n"}),
        ("fs/write_text_file", {"path": f"{real}/out.txt",
                                "content": "written by the model\n"}),
    ]
    # Only the client wrote: its buffers changed, the disk did not.
    assert notes.read_text() == "saved line\n" and not (cwd / "out.txt").exists()
    assert [p["toolCall"].title for p in editor.permissions] == ["Read ../outside.txt"]


@pytest.mark.skipif(os.name != "posix", reason="a symlinked directory")
def test_the_client_gets_the_path_as_the_session_spells_it(tmp_path: Path) -> None:
    """A workspace opened through a symlinked directory: the editor's buffer is keyed by
    the path it opened, which names the same file as the real path dsh judged."""
    linked = tmp_path / "linked"
    linked.symlink_to(Path.cwd(), target_is_directory=True)
    (Path.cwd() / "notes.txt").write_text("saved\n")
    spelled = str(linked / "notes.txt")
    editor = Editor(buffers={spelled: "unsaved\n"})
    script = [call("read_file", path="notes.txt"), {"text": "done"}]
    assert run_prompt(editor, tmp_path, script, cwd=str(linked)) == "end_turn"
    assert results(editor) == ["     1\tunsaved"]
    assert editor.calls == [("fs/read_text_file", {"path": spelled})]


def test_a_client_that_offers_only_reads_gets_only_reads(tmp_path: Path) -> None:
    notes = Path.cwd() / "notes.txt"
    notes.write_text("saved\n")
    editor = Editor(buffers={str(notes): "unsaved\n"})
    script = [call("edit_file", path="notes.txt", old_string="unsaved", new_string="edited"),
              call("bash", command="echo native"), {"text": "done"}]
    caps = {"fs": {"readTextFile": True}}
    assert run_prompt(editor, tmp_path, script, caps) == "end_turn"
    edited, ran = results(editor)
    assert edited == "Edited notes.txt: replaced 1 occurrence."
    # Read from the buffer, written by dsh itself (atomically, on disk); bash ran in dsh.
    assert editor.methods() == ["fs/read_text_file"]
    assert notes.read_text() == "edited\n"
    assert ran.endswith("native\n[Command finished with exit code 0]")


def test_a_client_that_advertises_nothing_is_never_asked(tmp_path: Path) -> None:
    notes = Path.cwd() / "notes.txt"
    notes.write_text("on disk\n")
    editor = Editor(buffers={str(notes): "unsaved\n"})
    script = [call("read_file", path="notes.txt"), call("bash", command="echo native"),
              {"text": "done"}]
    assert run_prompt(editor, tmp_path, script, caps=None) == "end_turn"
    read, ran = results(editor)
    assert read == "     1\ton disk" and ran.endswith("native\n[Command finished with exit code 0]")
    assert editor.calls == [] and editor.forbidden == []


def test_a_client_read_failure_is_the_tools_result(tmp_path: Path) -> None:
    """The client answers an error (no such buffer or file): the model reads it."""
    editor = Editor()
    script = [call("read_file", path="missing.txt"), {"text": "done"}]
    assert run_prompt(editor, tmp_path, script) == "end_turn"
    [read] = results(editor)
    assert read.startswith("cannot read missing.txt: the client did not give it: ")


# -- the terminal ---------------------------------------------------------------------------

def _sandbox_command_exists() -> bool:
    proc = subprocess.run([sys.executable, "-m", "dsh", "sandbox", "--help"],
                          capture_output=True, check=False)
    return proc.returncode == 0


@pytest.mark.skipif(os.name != "posix", reason="the terminal route is for POSIX shells")
def test_bash_runs_in_the_clients_terminal_as_dsh_sandbox(tmp_path: Path,
                                                          dsh_home: Path) -> None:
    """The client is given the shell policy's launcher, never the raw command; the
    terminal is embedded in the call, released at the end, and what the client's process
    printed is what the model reads."""
    sub = Path.cwd() / "sub"
    sub.mkdir()
    editor = Editor()
    script = [call("bash", command="echo from-terminal; pwd", workdir="sub"),
              {"text": "done"}]
    assert run_prompt(editor, tmp_path, script) == "end_turn"
    [created] = [args for method, args in editor.calls if method == "terminal/create"]
    argv = created["argv"]
    dash = argv.index("--")
    patches = [str(OFFLINE_PATCH.resolve()), str((tmp_path / "acp-patch.yml").resolve())]
    assert argv[:dash] == [sys.executable, "-m", "dsh", "sandbox", "--home", str(dsh_home),
                           "--profile", "acp", "--patch", patches[0], "--patch", patches[1],
                           "--row", "tools:shell", "--quiet"]
    shell, flag, command = argv[dash + 1:]
    assert Path(shell).name in ("bash", "sh") and flag == "-c"
    assert command == "cd -- sub || exit 1\necho from-terminal; pwd"
    assert created["cwd"] == os.path.realpath(Path.cwd())  # the workspace root
    assert created["outputByteLimit"] == 30000
    assert editor.methods() == ["terminal/create", "terminal/wait_for_exit",
                                "terminal/output", "terminal/release"]
    embedded = [u for u in editor.of("tool_call_update")
                if any(getattr(c, "type", "") == "terminal" for c in u.content or ())]
    assert [u.status for u in embedded] == ["in_progress", "completed"]
    assert all(c.terminal_id == "term-1" for u in embedded for c in u.content
               if getattr(c, "type", "") == "terminal")
    record = editor.terminals["term-1"]
    printed = record["output"].decode()
    code = record["proc"].returncode
    [result] = results(editor)
    assert result == f"{printed}[Command finished with exit code {code}]"
    if not _sandbox_command_exists():
        pytest.skip("`dsh sandbox` is not in this tree yet: the client ran the launcher, "
                    "which could not run the command")
    assert code == 0 and printed == f"from-terminal\n{os.path.realpath(sub)}\n"


@pytest.mark.skipif(os.name != "posix", reason="the terminal route is for POSIX shells")
def test_a_command_past_its_timeout_is_killed_in_the_terminal(tmp_path: Path) -> None:
    if not _sandbox_command_exists():
        pytest.skip("`dsh sandbox` is not in this tree yet: nothing would run long enough "
                    "to time out")
    editor = Editor()
    script = [call("bash", command="echo started; sleep 60", timeout=1), {"text": "done"}]
    assert run_prompt(editor, tmp_path, script) == "end_turn"
    assert editor.methods() == ["terminal/create", "terminal/wait_for_exit", "terminal/kill",
                                "terminal/output", "terminal/release"]
    [result] = results(editor)
    assert result == "started\n[Command timed out after 1 seconds; it was killed]"


# -- malformed permission answers -----------------------------------------------------------

MALFORMED = [
    {"outcome": {"outcome": "selected", "optionId": ["allow_once"]}},
    {"outcome": {"outcome": "selected", "optionId": {"id": "allow_once"}}},
    {"outcome": {"outcome": "selected", "optionId": 1}},
    {"outcome": {"outcome": "selected", "optionId": "allow_forever"}},
    {"outcome": {"outcome": "selected"}},
    {"outcome": ["selected", "allow_once"]},
    {"outcome": "allow_once"},
    ["allow_once"],
    "allow_once",
    None,
]


def test_malformed_permission_answers_deny_cleanly(tmp_path: Path) -> None:
    """Each malformed answer denies its call (never a TypeError); the turn and the
    connection go on, and a well-formed answer after them still allows."""
    script = [call("write_file", path=f"f{i}.txt", content="x") for i in range(len(MALFORMED))]
    script += [call("write_file", path="ok.txt", content="x"), {"text": "done"}]
    answers = iter([*MALFORMED, {"outcome": {"outcome": "selected", "optionId": "allow_once"}}])
    raw = RawAcp(write_patch(tmp_path, script, mode="ask"))
    try:
        answer = raw.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert answer["result"]["protocolVersion"] == 1
        session_id = raw.call("session/new", {"cwd": os.getcwd(),
                                              "mcpServers": []})["result"]["sessionId"]
        rid = raw.request("session/prompt", {"sessionId": session_id,
                                             "prompt": [{"type": "text", "text": "go"}]})
        frames = raw.until(lambda f: f.get("id") == rid and "method" not in f,
                           lambda frame: next(answers))
        assert frames[-1]["result"] == {"stopReason": "end_turn"}
        raw.close_stdin()
        assert raw.wait() == 0
        stderr = raw.stderr()
    finally:
        raw.finish()
    finished = [f["params"]["update"] for f in frames if f.get("method") == "session/update"
                and f["params"]["update"].get("sessionUpdate") == "tool_call_update"
                and f["params"]["update"].get("status") in ("completed", "failed")]
    texts = [u["content"][0]["content"]["text"] for u in finished]
    assert texts[:-1] == ["Error: the client denied this tool call"] * len(MALFORMED)
    assert texts[-1] == "Created ok.txt (1 bytes)."
    assert [p.name for p in Path.cwd().iterdir()] == ["ok.txt"]
    assert "TypeError" not in stderr and "Traceback" not in stderr
