"""The web page shows the task list: ``todo_write`` in a real ``dsh web``, the page in
headless chromium (skipped, saying why, without playwright or chromium)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from webkit import WebProcess, write_patch

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

SCRIPT = """\
- text: "Listing the work."
  tool_calls: [{name: todo_write, arguments: {todos: [
    {content: "Survey the code", status: in_progress, priority: high},
    {content: "Write the notes", status: pending}]}}]
- text: "Surveyed."
  tool_calls: [{name: todo_write, arguments: {todos: [
    {content: "Survey the code", status: completed, priority: high},
    {content: "Write the notes", status: in_progress}]}}]
- text: "Both listed."
"""


def test_the_page_shows_the_latest_task_list(tmp_path: Path) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; scripts/dev-setup.sh)")
    patch = write_patch(tmp_path, SCRIPT)
    with WebProcess([patch], cwd=Path.cwd()) as web, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(20_000)
            problems: list[str] = []
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(web.info["url"])
            page.wait_for_selector("#profile:has-text('profile web')")
            assert page.locator("#plan").is_hidden()
            page.fill("#prompt", "Plan the work.")
            page.click("#send")
            page.wait_for_selector(".msg.assistant:has-text('Both listed.')")
            items = page.locator("#plan li")
            assert items.count() == 2
            assert items.nth(0).get_attribute("class") == "completed"
            assert "Survey the code" in items.nth(0).inner_text()
            assert "high" in items.nth(0).inner_text()
            assert items.nth(1).get_attribute("class") == "in_progress"
            assert problems == []
        finally:
            browser.close()
