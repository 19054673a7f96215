"""The page in a real browser: Playwright (Python) driving Debian's chromium, headless.

Loads the page with its token, sends a prompt, watches the answer stream in with a tool
call, approves a guarded ``write_file`` (policy in ``ask`` mode), and checks the
effective config view; a screenshot goes to ``test-artifacts/web-ui.png``. Skips, saying
why, when the ``playwright`` package or ``/usr/bin/chromium`` is missing
(``scripts/dev-setup.sh`` installs both).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from webkit import REPO, WebProcess, write_patch

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts"
TIMEOUT_MS = 20_000

SCRIPT = """\
- text: "Let me check where I am before writing anything."
  tool_calls: [{name: working_directory, arguments: {}}]
- text: "Writing the note."
  tool_calls: [{name: write_file, arguments: {path: note.txt, content: "hello from the page"}}]
- reasoning: "The note is written; I can say so."
  text: "Done: I wrote note.txt in the working directory."
"""

# Records every length the streamed assistant text had, to see it grow in steps.
OBSERVE = """() => {
  window.__lengths = [];
  new MutationObserver(() => {
    for (const node of document.querySelectorAll('#log .msg.assistant')) {
      window.__lengths.push(node.textContent.length);
    }
  }).observe(document.getElementById('log'),
             {subtree: true, childList: true, characterData: true});
}"""


def _playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; scripts/dev-setup.sh)")
    return sync_playwright


def test_page_streams_approves_and_shows_config(tmp_path: Path) -> None:
    sync_playwright = _playwright()
    patch = write_patch(tmp_path, SCRIPT, extra="- {id: policy, merge: {config: {mode: ask}}}\n")
    with WebProcess([patch], cwd=Path.cwd()) as web, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.set_default_timeout(TIMEOUT_MS)
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(web.info["url"])
            page.wait_for_selector("#profile:has-text('profile web')")
            page.evaluate(OBSERVE)

            page.fill("#prompt", "Please write a note.")
            page.click("#send")
            page.wait_for_selector(".msg.user:has-text('Please write a note.')")
            call = page.wait_for_selector(".tool-call:has-text('working_directory')")
            call.wait_for_selector(".result")
            approve = page.wait_for_selector(".approval:has-text('write_file') button.approve")
            assert "note.txt" in page.inner_text("#approvals")
            assert not (Path.cwd() / "note.txt").exists()  # parked until approved
            approve.click()
            page.wait_for_selector(".msg.assistant:has-text('Done: I wrote note.txt')")
            page.wait_for_selector("#session-status:has-text('idle')")
            assert page.inner_text("#approvals") == ""
            assert (Path.cwd() / "note.txt").read_text() == "hello from the page"
            written = page.wait_for_selector(".tool-call:has-text('write_file') .result")
            assert "note.txt" in written.inner_text()
            # The model's reasoning sits in its own collapsed "thinking" section, never in
            # the answer's text.
            done = page.locator(".msg.assistant:has-text('Done: I wrote note.txt')")
            section = done.locator("details.thinking")
            assert section.count() == 1 and section.get_attribute("open") is None
            assert section.locator("summary").inner_text() == "thinking"
            assert "The note is written" not in done.locator(".answer").inner_text()
            section.locator("summary").click()
            assert section.locator(".thinking-text").inner_text() == (
                "The note is written; I can say so.")
            lengths = page.evaluate("window.__lengths")
            final = len("Done: I wrote note.txt in the working directory.")
            assert any(0 < n < final for n in lengths), lengths  # it streamed in pieces
            assert page.locator("#sessions li").count() == 1
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "web-ui-conversation.png"), full_page=True)

            page.click("#tabs button[data-view='config']")
            policy = page.wait_for_selector("#config .row[data-id='policy']")
            text = policy.inner_text()
            assert "config.mode" in text and "ask" in text and str(patch) in text
            server = page.wait_for_selector("#config .row[data-id='web-server']").inner_text()
            assert "dsh-web-app:" in server
            assert "patch-reload live" in page.inner_text("#config-meta")
            page.screenshot(path=str(ARTIFACTS / "web-ui-config.png"), full_page=True)
            assert problems == []
        finally:
            browser.close()
