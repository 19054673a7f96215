"""The README's chat screenshots, made by driving the real chat (Textual's test pilot,
in-process) against the real runtime with the scripted model: a conversation with an
approval, then the diff of the change it allowed.

The test always renders both screens and checks what they show; with
``DSH_UPDATE_SCREENSHOTS=1`` it also writes them to ``docs/chat/`` (SVG, as Textual
exports a screen), where the README shows them.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

pytest.importorskip("textual", reason="the chat extra (pip install 'dsh-harness[chat]')")

from chatkit import scripted_patch

from dsh.chat.app import ChatApp
from dsh.chat.options import ChatOptions

DOCS = Path(__file__).resolve().parents[2] / "docs" / "chat"
UPDATE = os.environ.get("DSH_UPDATE_SCREENSHOTS") == "1"  # read before the fixtures clear DSH_*
GREET = "def greet(name):\n    return 'hello ' + name\n"
SCRIPT = [
    {"reasoning": "The user wants a friendlier greeting. greet.py has the function; an "
                  "f-string with the name reads better, and a default helps callers.",
     "text": "I'll update `greet` in **greet.py**.",
     "tool_calls": [{"name": "edit_file", "arguments": {
         "path": "greet.py", "old_string": "def greet(name):\n    return 'hello ' + name",
         "new_string": "def greet(name: str = \"world\") -> str:\n"
                       "    return f\"Hello, {name}!\""}}],
     "usage": {"inputTokens": 5200, "outputTokens": 120, "cacheHitTokens": 4100,
               "costUsd": 0.00041}},
    {"text": "## Done\n\n`greet` now:\n\n| change | why |\n|---|---|\n"
             "| an f-string | reads better |\n| a default name | `greet()` works |\n\n"
             "```python\n>>> greet(\"dsh\")\n'Hello, dsh!'\n```\n",
     "usage": {"inputTokens": 5400, "outputTokens": 60, "cacheHitTokens": 5100,
               "costUsd": 0.00022}},
]


async def _drive(options: ChatOptions, shots: dict[str, str]) -> None:
    app = ChatApp(options)
    async with app.run_test(size=(100, 34)) as pilot:
        await asyncio.wait_for(app.ready.wait(), 60)
        for _ in range(200):  # the doctor's sandbox report
            if "…" not in app.status.sandbox:
                break
            await pilot.pause(0.05)
        app.composer.text = "make greet() friendlier"
        await pilot.press("enter")
        for _ in range(400):
            await pilot.pause(0.05)
            if app.query("ApprovalPrompt"):
                break
        await pilot.pause(0.3)
        shots["approval"] = app.export_screenshot(title="dsh chat: an approval")
        await pilot.press("a")
        for _ in range(400):
            await pilot.pause(0.05)
            if not app.running and app.status.running_since is None and "Done" in str(
                    [getattr(a, "text", "") for a in app.query("Answer")]):
                break
        await pilot.pause(0.5)
        app.transcript.scroll_home(animate=False)
        await pilot.pause(0.3)
        shots["diff"] = app.export_screenshot(title="dsh chat: the change, as a diff")
        await pilot.press("ctrl+d")


def test_screenshots_of_a_conversation_with_an_approval_and_a_diff(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    work = tmp_path / "project"
    work.mkdir()
    (work / "greet.py").write_text(GREET)
    patch, _ = scripted_patch(tmp_path, SCRIPT)
    options = ChatOptions("chat", tmp_path / "home", (str(patch),), work)
    shots: dict[str, str] = {}
    asyncio.run(_drive(options, shots))
    approval, diff = shots["approval"], shots["diff"]
    assert "Allow" in approval and "edit_file" in approval and "allow&#160;once" in approval
    assert "greet.py" in diff and "Hello,&#160;{name}!" in diff
    assert (work / "greet.py").read_text().startswith('def greet(name: str = "world")')
    if UPDATE:
        DOCS.mkdir(parents=True, exist_ok=True)
        (DOCS / "approval.svg").write_text(approval)
        (DOCS / "diff.svg").write_text(diff)
