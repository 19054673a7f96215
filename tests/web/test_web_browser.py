"""The page in a real browser: Playwright (Python) driving Debian's chromium, headless.

Loads the page with its token, sends a prompt, watches the answer stream in with a tool
call, approves a guarded ``write_file`` (policy in ``ask`` mode), and checks the
effective config view; a screenshot goes to ``test-artifacts/web-ui.png``. Then the
answers as a reader sees them: Markdown rendered as elements with highlighted code, a
list of XSS payloads (and a 5 MB table, and deep nesting) that must run nothing and load
nothing, a file edit shown as a coloured diff, a failed turn in the red banner, usage per
turn and per session, and the session list's filter (screenshots in the test's tmp dir).
Skips, saying why, when the ``playwright`` package or ``/usr/bin/chromium`` is missing
(``scripts/dev-setup.sh`` installs both).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
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


# -- answers as a reader sees them -----------------------------------------------------

MARKDOWN = """## Result

Some **bold** text and `inline code`, with [a link](https://example.com/docs "the docs").

| name | count |
|:-----|------:|
| alpha | 1 |
| beta | 22 |

```python
def greet(name: str) -> str:
    return f"hello {name}"
```

- one
- two
"""

# Each tries to run script (setting window.__xss or calling alert) or to load something
# (evil.example); none may succeed. Raw HTML in an answer is text to markdown-it, and
# DOMPurify would drop what got through anyway: both are exercised.
XSS = [
    "<script>window.__xss = 1</script>",
    "<img src=x onerror=\"window.__xss = 2\">",
    "[click me](javascript:window.__xss=3)",
    "<svg onload=\"window.__xss = 4\"><circle r=1 /></svg>",
    "<iframe srcdoc=\"<script>parent.__xss = 5</script>\"></iframe>",
    "[data link](data:text/html;base64,PHNjcmlwdD5wYXJlbnQuX194c3M9Njwvc2NyaXB0Pg==)",
    "![data image](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9ImFsZXJ0KDcpIi8+)",
    "<style>body { background: url(http://evil.example/style-tag) }</style>",
    "<div style=\"background:url(http://evil.example/style-attr)\">styled</div>",
    "![tracking pixel](http://evil.example/pixel.png)",
    "[mixed case](JaVaScRiPt:window.__xss=11)",
    "[entity](&#106;avascript:window.__xss=12)",
    "<a href=\"jav&#x09;ascript:window.__xss=13\">tab entity</a>",
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__xss=14>",
    "<details open ontoggle=\"window.__xss = 15\">toggle</details>",
    "<object data=\"javascript:window.__xss=16\"></object>",
    "<embed src=\"http://evil.example/embed.swf\">",
    "<link rel=stylesheet href=\"http://evil.example/link.css\">",
    "<meta http-equiv=\"refresh\" content=\"0;url=http://evil.example/meta\">",
    "<form action=\"http://evil.example/form\"><button>go</button></form>",
    "`<img src=x onerror=window.__xss=21>` in inline code",
    "```html\n<script>window.__xss = 22</script>\n<img src=x onerror=window.__xss=22>\n```",
    "<a href=\"https://example.com\" ping=\"http://evil.example/ping\">ping</a>",
    "[vb](vbscript:msgbox(24))",
    "<b><i><u><div><span onclick=\"window.__xss = 25\">unclosed",
    "<base href=\"http://evil.example/\">",
    "<input autofocus onfocus=\"window.__xss = 27\">",
    "<video><source onerror=\"window.__xss = 28\"></video>",
    "<noscript><p title=\"</noscript><img src=x onerror=window.__xss=29>\">",
    "[title trick](https://example.com \"t\\\" onmouseover=\\\"window.__xss=30\")",
    "<javascript:window.__xss=31>",
    "[ref link][r]\n\n[r]: javascript:window.__xss=32",
    "&lt;script&gt;window.__xss = 33&lt;/script&gt; &#60;img src=x onerror=window.__xss=33&#62;",
    "<scr<script>ipt>window.__xss = 34</scr</script>ipt>",
    "[![img in link](http://evil.example/nested.png)](javascript:window.__xss=35)",
]
DEEP = ">" * 5000 + " deep quote\n\n" + "[" * 3000 + "x" + "]" * 3000 + "\n\n" + \
    "".join("  " * i + "- nested\n" for i in range(300)) + "\n" + "*" * 5000 + "\n"
BIG_TABLE = "| a | b | c |\n|---|---|---|\n" + "".join(
    f"| <img src=x onerror=window.__xss=99> {i} | row {i} | `code` |\n" for i in range(95000))

# Installed before the page's own scripts: every CSP violation and every attempt at
# script, recorded where the test can read them.
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
"""
FORBIDDEN_ELEMENTS = ("script, iframe, img, svg, math, object, embed, style, link, meta, "
                      "form, input, video, audio, source, base, noscript, frame")
DOM_AUDIT = """(root) => {
  const found = [];
  for (const node of document.querySelector(root).querySelectorAll("*")) {
    for (const attr of node.attributes) {
      const value = attr.value.trim().toLowerCase();
      if (attr.name === "style" || attr.name.startsWith("on") ||
          ((attr.name === "href" || attr.name === "src" || attr.name === "action") &&
           /^(javascript|vbscript|data):/.test(value))) {
        found.push(node.tagName + " " + attr.name + "=" + attr.value);
      }
    }
  }
  return found;
}"""


def scripted_jsonl(directory: Path, responses: list[dict[str, Any]], *,
                   chunk_size: int = 16, extra: str = "") -> Path:
    """A patch running the scripted provider on a JSON-lines script (fast for big ones)."""
    script = directory / "script.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in responses))
    patch = directory / "jsonl-patch.yml"
    patch.write_text(
        "- insert:\n"
        f"    - {{id: llm-scripted, name: llm-scripted, config: {{script: !path script.jsonl, "
        f"chunk_size: {chunk_size}}}}}\n"
        "- {id: agent, merge: {config: {default_route: scripted}}}\n" + extra)
    return patch


class Watched:
    """A page with every request, dialog, console error and CSP violation recorded."""

    def __init__(self, browser: Any, web: WebProcess) -> None:
        self.page = browser.new_page(viewport={"width": 1200, "height": 900})
        self.page.set_default_timeout(TIMEOUT_MS)
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.problems: list[str] = []
        self.page.add_init_script(WATCH)
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", self._dialog)
        self.page.on("console",
                     lambda m: self.problems.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.problems.append(str(e)))
        self.base = web.base
        self.page.goto(web.info["url"])
        self.page.wait_for_selector("#profile:has-text('profile web')")

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def ask(self, text: str, done: str, *, outcome: str = "completed") -> None:
        """Send ``text``, wait for that turn's end (which must say ``outcome``) and for
        ``done`` to be shown."""
        ended = self.page.locator(".turn-end").count()
        self.page.fill("#prompt", text)
        self.page.click("#send")
        end = self.page.locator(".turn-end").nth(ended)
        end.wait_for()
        line = end.inner_text()
        assert line.startswith(f"turn {ended + 1} {outcome}"), line
        self.page.wait_for_selector(done)
        self.page.wait_for_selector("#session-status:has-text('idle')")

    def assert_nothing_ran_or_left(self) -> None:
        assert self.page.evaluate("window.__xss") is None
        assert self.dialogs == []
        assert self.page.evaluate("window.__csp") == []
        assert self.problems == []
        own = urlsplit(self.base)
        for url in self.requests:
            parts = urlsplit(url)
            assert (parts.scheme, parts.netloc) == (own.scheme, own.netloc), url
            assert parts.path == "/" or parts.path.startswith(("/static/", "/api/")), url


def test_answers_render_as_sanitized_markdown(tmp_path: Path) -> None:
    sync_playwright = _playwright()
    hostile_file = "<img src=x onerror=window.__xss=40>\n<script>window.__xss=41</script>\n"
    (Path.cwd() / "page.html").write_text(hostile_file)
    responses = [
        {"text": MARKDOWN},
        {"text": "Reading it.", "tool_calls": [
            {"name": "read_file", "arguments": {"path": "page.html"}},
            {"name": "edit_file", "arguments": {
                "path": "page.html", "old_string": "<script>window.__xss=41</script>",
                "new_string": "<svg onload=window.__xss=42></svg>"}}]},
        {"text": "Edited."},
        {"text": "\n\n".join(XSS) + "\n\nEND-OF-XSS"},
        {"text": DEEP + "\nEND-OF-DEEP"},
        {"text": BIG_TABLE + "END-OF-TABLE"},
    ]
    patch = scripted_jsonl(tmp_path, responses, chunk_size=65536)
    with WebProcess([patch], cwd=Path.cwd()) as web, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            watched = Watched(browser, web)
            page = watched.page
            watched.ask("<img src=x onerror=window.__xss=50> show me markdown",
                        ".msg.assistant h2:has-text('Result')")
            answer = page.locator(".msg.assistant .answer").first
            assert answer.locator("h2").inner_text() == "Result"
            assert answer.locator("strong").inner_text() == "bold"
            assert answer.locator("table tbody tr").count() == 2
            assert answer.locator("th.align-right").inner_text() == "count"
            assert answer.locator("td.align-right").first.inner_text() == "1"
            code = answer.locator("pre code.hljs.language-python")
            assert "def greet" in code.inner_text()
            assert code.locator("span.hljs-keyword").first.inner_text() == "def"
            link = answer.locator("a:has-text('a link')")
            assert link.get_attribute("href") == "https://example.com/docs"
            assert link.get_attribute("target") == "_blank"
            assert link.get_attribute("rel") == "noopener noreferrer nofollow"
            assert answer.locator("li").count() == 2
            # The prompt (and the session's title) is text, never markup.
            assert "<img src=x" in page.inner_text(".msg.user")
            page.screenshot(path=str(tmp_path / "markdown.png"), full_page=True)

            watched.ask("read and edit it", ".tool-call:has-text('edit_file') details.diff")
            diff = page.locator(".tool-call:has-text('edit_file') details.diff")
            assert diff.locator(".del").inner_text().strip() == (
                "-<script>window.__xss=41</script>")
            assert diff.locator(".add").inner_text().strip() == (
                "+<svg onload=window.__xss=42></svg>")
            assert "+1" in diff.locator("summary").inner_text()
            read = page.locator(".tool-call:has-text('read_file') .result").inner_text()
            assert "<img src=x onerror=window.__xss=40>" in read  # shown as text

            watched.ask("now the payloads", ".msg.assistant:has-text('END-OF-XSS')")
            xss = page.locator(".msg.assistant:has-text('END-OF-XSS') .answer")
            assert xss.locator(FORBIDDEN_ELEMENTS).count() == 0
            assert "<script>window.__xss = 1</script>" in xss.inner_text()  # shown as text
            assert xss.locator("a.image-link").count() >= 2  # images became links
            page.screenshot(path=str(tmp_path / "xss.png"), full_page=True)

            watched.ask("deep", ".msg.assistant:has-text('END-OF-DEEP')")
            deep = page.locator(".msg.assistant:has-text('END-OF-DEEP') .answer")
            assert deep.locator(".note").inner_text() == (
                "(nested too deeply to render: shown as plain text)")
            deep.locator(".note").scroll_into_view_if_needed()
            page.screenshot(path=str(tmp_path / "deep.png"))
            watched.ask("big table", ".msg.assistant:has-text('END-OF-TABLE')")
            big = page.locator(".msg.assistant:has-text('END-OF-TABLE') .answer")
            assert big.locator(".note").inner_text().endswith("shown as plain text)")
            assert big.locator("table").count() == 0
            assert page.evaluate(DOM_AUDIT, "#log") == []
            assert page.locator(f"#log :is({FORBIDDEN_ELEMENTS})").count() == 0
            assert page.locator(f"#sessions :is({FORBIDDEN_ELEMENTS})").count() == 0
            page.locator("#log").evaluate("(log) => { log.scrollTop = log.scrollHeight; }")
            page.screenshot(path=str(tmp_path / "big-table-end.png"))
            watched.assert_nothing_ran_or_left()
        finally:
            browser.close()


def test_turn_errors_usage_and_the_session_list(tmp_path: Path) -> None:
    sync_playwright = _playwright()
    from playwright.sync_api import expect
    responses = [
        {"text": "The first answer.", "usage": {"inputTokens": 1200, "outputTokens": 30}},
        {"error": {"message": "no API key for route 'x': X_KEY is not set",
                   "code": "missing-key"}},
        {"text": "Recovered.", "usage": {"inputTokens": 1500, "outputTokens": 20}},
    ]
    patch = scripted_jsonl(tmp_path, responses)
    with WebProcess([patch], cwd=Path.cwd()) as web, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            watched = Watched(browser, web)
            page = watched.page
            watched.ask("alpha question", ".msg.assistant:has-text('The first answer.')")
            end = page.wait_for_selector(".turn-end:has-text('turn 1 completed')")
            assert "1,200 in" in end.inner_text() and "30 out" in end.inner_text()
            assert "cost unknown" in end.inner_text() and "1 step" in end.inner_text()
            assert page.is_hidden("#error")

            page.fill("#prompt", "second question")
            page.click("#send")
            banner = page.wait_for_selector("#error.turn")
            assert page.inner_text("#error-title") == "Turn 2 failed (missing-key)"
            assert page.inner_text("#error-message") == (
                "no API key for route 'x': X_KEY is not set")
            card = page.wait_for_selector(".msg.turn-error")
            assert "Turn 2 failed" in card.inner_text()
            assert page.inner_text(".turn-end >> nth=1").startswith("turn 2 failed · 1 step")
            page.wait_for_selector("#session-status:has-text('idle')")
            assert banner.is_visible()  # requests since then did not clear it
            page.screenshot(path=str(tmp_path / "turn-error.png"), full_page=True)

            watched.ask("third question", ".msg.assistant:has-text('Recovered.')")
            assert page.is_hidden("#error")  # the next turn cleared it
            usage = page.inner_text("#session-usage")
            assert usage.startswith("3 turns · 2,700 in · 50 out"), usage

            # A second session, then the filter: titles, ids and folders are searched.
            page.click("#new-session")
            expect(page.locator("#log > *")).to_have_count(0)  # the new session is shown
            watched.ask("beta question", ".msg.assistant:has-text('The first answer.')")
            items = page.locator("#sessions li")
            expect(items).to_have_count(2)
            page.fill("#session-filter", "ALPHA")
            expect(items).to_have_count(1)
            assert page.inner_text("#sessions li .title") == "alpha question"
            page.fill("#session-filter", "nothing like it")
            expect(items).to_have_text(["no session matches"])
            page.fill("#session-filter", "")
            expect(items).to_have_count(2)
            # With the listing's summaries (updatedAt, turns, costUsd) each session says
            # how old it is and how many turns it had, newest first; without them, its
            # status only.
            listing = httpx.get(f"{web.base}/api/sessions",
                                headers={"Authorization": f"Bearer {web.token}"}).json()
            metas = page.locator("#sessions li .meta").all_inner_texts()
            if "turns" in listing["sessions"][0]:
                assert metas == ["just now · 1 turn · idle", "just now · 3 turns · idle"]
                assert page.inner_text("#sessions li:first-child .title") == "beta question"
            else:
                assert metas == ["idle", "idle"]
            page.screenshot(path=str(tmp_path / "sessions.png"), full_page=True)
            watched.assert_nothing_ran_or_left()
        finally:
            browser.close()
