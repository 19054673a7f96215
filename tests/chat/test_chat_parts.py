"""The chat's pure parts: the markdown parser that cannot carry a control, slash commands,
@path attachments (inside the workspace only), the input history, the status line."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("textual", reason="the chat extra (pip install 'dsh-harness[chat]')")

from dsh.chat import attach, commands
from dsh.chat.history import MAX_ENTRIES, History
from dsh.chat.safety import markdown_parser, text
from dsh.chat.status import Status, render, sandbox_of


def _tokens(tokens: list) -> list:
    out = []
    for token in tokens:
        out.append(token)
        out.extend(_tokens(token.children or []))
    return out


@pytest.mark.parametrize("source", [
    "# title \x1b]0;pwned\x07",
    "text &#27;[2J and &#x1b;]52;c;eA==&#7; and &#x9b;2J and &#155;",
    "[link](http://x/\x1b]52;c;eA==\x07 \"t\x1b[2J\")",
    "[ref][r]\n\n[r]: http://x/&#27;]0;t&#7;",
    "```py\x1b[31m\ncode \x1b[2J\n```",
    "| a | b |\n|---|---|\n| \x1b[2J | &#x202e;evil |",
    "<span>\x1b]52;c;eA==\x07</span> &#x202E; \u202e",
])
def test_no_markdown_token_carries_a_control(source: str) -> None:
    for token in _tokens(markdown_parser().parse(source)):
        values = [token.content, token.info, *(v for v in (token.attrs or {}).values()
                                               if isinstance(v, str))]
        for value in values:
            assert not any(ord(c) < 0x20 and c not in "\n\t" for c in value), (token, value)
            assert not any(0x7F <= ord(c) <= 0x9F for c in value), (token, value)
            assert "\u202e" not in value


def test_foreign_text_is_never_markup() -> None:
    shown = text("[bold red]not markup[/] \x1b[2J")
    assert shown.plain == "[bold red]not markup[/] ^[[2J"
    assert not shown.spans


def test_commands_parse_complete_and_help() -> None:
    command = commands.parse("/model deepseek-official/deepseek-v4-pro")
    assert isinstance(command, commands.Command)
    assert (command.spec.name, command.argument) == ("model",
                                                     "deepseek-official/deepseek-v4-pro")
    assert commands.parse("/quit now") == "/quit takes no argument"
    assert "did you mean /model" in str(commands.parse("/mdl"))
    assert commands.parse("//not a command") is None and commands.parse("hello") is None
    assert commands.completions("/re") == ["/resume"]
    assert set(commands.completions("/")) == {f"/{s.name}" for s in commands.COMMANDS}
    shown = commands.help_text()
    for name in ("new", "sessions", "resume", "model", "effort", "provider", "compact",
                 "cost", "diff", "approval", "clear", "quit", "help"):
        assert f"`/{name}" in shown


def test_attachments_stay_inside_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "notes.md").write_text("alpha\n")
    (tmp_path / "secret.txt").write_text("no")
    (root / "link").symlink_to(tmp_path / "secret.txt")
    (root / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    (root / "blob.bin").write_bytes(b"\0\1\2")
    (root / "big.txt").write_text("x" * (attach.MAX_TEXT_BYTES + 10))
    got = attach.attach(str(root), str(root), "sub/notes.md")
    assert got.block == {"type": "text",
                         "text": "Attached file sub/notes.md:\n```\nalpha\n\n```"}
    image = attach.attach(str(root), str(root), "pic.png")
    assert image.block["mimeType"] == "image/png"
    assert base64.b64decode(image.block["data"]).startswith(b"\x89PNG")
    cut = attach.attach(str(root), str(root), "big.txt")
    assert "[cut: only the first" in cut.block["text"] and "cut" in cut.said
    for refused in ("../secret.txt", "link", "blob.bin", "missing.txt", "sub"):
        with pytest.raises(attach.AttachError):
            attach.attach(str(root), str(root), refused)
    assert attach.mentions("read @sub/notes.md and @my\\ file.txt, not a@b") == [
        "sub/notes.md", "my file.txt"]
    assert attach.candidates(str(root), str(root), "su") == ["sub/"]
    assert attach.candidates(str(root), str(root), "sub/n") == ["sub/notes.md"]
    assert attach.candidates(str(root), str(root), "../") == []


def test_history_is_capped_private_and_skips_secrets(tmp_path: Path) -> None:
    history = History(tmp_path, "chat")
    history.add("first")
    history.add("first")  # a repeat is not kept twice
    history.add("a password", secret=True)
    history.add("x" * 100_000)  # too long: a paste is not history
    assert History(tmp_path, "chat").entries == ["first"]
    assert (os.stat(history.path).st_mode & 0o777) == 0o600
    for i in range(MAX_ENTRIES + 5):
        history.add(f"entry {i}")
    again = History(tmp_path, "chat")
    assert len(again.entries) == MAX_ENTRIES and again.entries[-1] == f"entry {MAX_ENTRIES + 4}"
    assert History(tmp_path, "other").entries == []  # per profile
    history.path.write_text("not json\n" + json.dumps("kept") + "\n")
    assert History(tmp_path, "chat").entries == ["kept"]


def test_the_status_line() -> None:
    status = Status(provider="deepseek-official", model="deepseek-flash", effort="high",
                    policy="ask", context_tokens=64_000, context_window=128_000,
                    input_tokens=10_000, output_tokens=500, cache_hit_tokens=8_000,
                    cost_usd=0.0123, workspace="/w/p", session_id="abcdef0123",
                    sandbox="workspace-write, network off; bubblewrap works here")
    line = render(status, 0.0, width=300).plain
    assert line == ("deepseek-flash·high │ ctx 50% of 128.0k │ 10.5k tok, 80% cached │ "
                    "$0.0123 │ ask │ /w/p │ abcdef01 │ sandbox: workspace-write, network off; "
                    "bubblewrap works here")
    status.running_since = 0.0
    assert render(status, 3.25, width=300).plain.startswith("⠹ working 3.2s │")
    narrow = render(status, 3.25, width=80).plain.split("\n")
    assert len(narrow) == 2 and all(len(x) <= 80 for x in narrow)
    assert sandbox_of({"data": {"checks": [
        {"id": "limits.tools:shell", "status": "ok", "message": "cgroup"},
        {"id": "sandbox.tools:shell", "status": "warn", "message": "unsandboxed (no bwrap)"},
    ]}}) == "warn: unsandboxed"
