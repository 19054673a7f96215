"""The terminal chat (``dsh chat``): launch to input ready, what one streamed delta costs
to draw, memory after a long session, and keystroke echo while a turn streams.

Two rows drive the real ``dsh chat`` in a pseudo-terminal (pexpect) and read the screen
through a terminal emulator (pyte), as the tests do; two run the chat's Textual app
headless in a fresh interpreter (its own test driver, which composes every frame as a
terminal would get it) over a real runtime with the scripted model, and feed it events.
Without pexpect and pyte (the ``test`` extra) or Textual (the ``chat`` extra) the rows
are skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchlib.procs import PythonPass, installed_environ, median_ms, ms, timed_python
from benchlib.registry import Metric, Options, Result, benchmark

READY_MARK = "Enter sends"
"""On screen once the editor is drawn and takes keys (its placeholder)."""

LAUNCH = Metric(
    "chat_launch_to_input_ready", "ms", "<", 900,
    about="`dsh chat` spawned in an 80x24 pseudo-terminal (python carrier, scripted model) "
          "to its editor on the screen, taking keys (read through a terminal emulator); "
          "the runtime boots meanwhile, and what is typed before it is ready waits for it.",
    changes="The chat's imports (Textual, rich), its first frame, the launcher's profile "
            "resolution, CPU speed and load. Target 900 ms: under a second, what a person "
            "takes for an immediate start.")
DELTA = Metric(
    "chat_delta_render", "ms", "<", 1.0,
    about="One streamed `assistant/delta` (16 characters) of a 48 kB markdown answer "
          "(headings, paragraphs, lists, tables, code) through the chat's event handler and "
          "its answer widget (dsh.chat.answer: parts of a few blocks, only the live one "
          "drawn again), the event loop running between deltas as it does when they come "
          "from the runtime, frames composed (at most 30 a second): the wall time of 3,000 "
          "deltas, to the last one drawn, over 3,000.",
    changes="The answer's parts (how many blocks one holds), rich's markdown rendering and "
            "Textual's compositor, the answer's shape, CPU speed and load. Target 1 ms a "
            "delta (issue 31).")
MEMORY = Metric(
    "chat_memory_1000_messages", "MB", "<", 150,
    about="Resident memory of the chat's process after a session of 1,000 messages (500 "
          "prompts, 500 markdown answers of ~600 characters) is drawn in its transcript; "
          "the runtime, a process of its own, not counted.",
    changes="Textual's widgets per message, the markdown's blocks, the interpreter. Target "
            "150 MB (issue 31).")
ECHO = Metric(
    "chat_keystroke_echo_streaming", "ms", "<", 50,
    about="A key typed into the editor while a long answer streams (scripted, ~18k deltas "
          "of 16 characters, one a millisecond), "
          "to the character on the screen of the pseudo-terminal (read through a terminal "
          "emulator); median of 25 keys. `idle_ms`: the same before the answer starts, in "
          "the same chat (what input costs at all here: Textual's input and output "
          "threads, the pseudo-terminal, the scheduler), so the streaming share is the "
          "difference.",
    changes="The event loop's share between the stream and input, Textual's refresh rate, "
            "CPU speed and load (each wakeup of the chat's threads waits for a core). "
            "Target 50 ms (issue 31).")


def _missing(*modules: str) -> str | None:
    gone = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"needs {', '.join(gone)} (pip install -e '.[test,chat]')" if gone else None


def _patch(tmp: str, responses: list[dict[str, Any]], chunk: int = 16) -> Path:
    script = Path(tmp, "script.yml")
    script.write_text(yaml.safe_dump(responses))
    patch = Path(tmp, "chat-bench.yml")
    patch.write_text(yaml.safe_dump([
        {"insert": [{"id": "llm-scripted", "name": "llm-scripted",
                     "config": {"script": str(script), "chunk_size": chunk,
                                "context_window": 10_000_000}}]},
        {"id": "agent", "merge": {"config": {"default_route": "scripted"}}}]))
    return patch


class _Pty:
    """``dsh ARGS`` in a pseudo-terminal, its screen kept by pyte."""

    def __init__(self, args: list[str], environ: dict[str, str], cwd: str) -> None:
        import sys

        import pexpect
        import pyte

        self.screen = pyte.Screen(80, 24)
        self.stream = pyte.ByteStream(self.screen)
        env = {**environ, "TERM": "xterm-256color", "LANG": "C.UTF-8"}
        self.t0 = time.perf_counter()
        self.child = pexpect.spawn(sys.executable, ["-m", "dsh", *args], env=env, cwd=cwd,
                                   dimensions=(24, 80))
        # pexpect sleeps 50 ms before every send by default (for children that are slow to
        # set their terminal up): inside a timed keystroke it would be most of the figure.
        self.child.delaybeforesend = None
        self._pexpect = pexpect

    def pump(self) -> None:
        try:
            data = self.child.read_nonblocking(65536, timeout=0.002)
        except (self._pexpect.TIMEOUT, self._pexpect.EOF):
            return
        self.stream.feed(data)

    def shows(self, text: str) -> bool:
        return any(text in row for row in self.screen.display)

    def wait(self, text: str, timeout: float = 60) -> float:
        deadline = time.perf_counter() + timeout
        while not self.shows(text):
            if time.perf_counter() > deadline or not self.child.isalive():
                raise RuntimeError(f"the chat never showed {text!r}")
            self.pump()
        return time.perf_counter()

    def close(self) -> None:
        self.child.sendcontrol("d")
        deadline = time.perf_counter() + 10
        while self.child.isalive() and time.perf_counter() < deadline:
            self.pump()
        self.child.close(force=True)


@benchmark("chat_launch_to_input_ready", LAUNCH)
def chat_launch(opts: Options) -> Result:
    """Spawn ``dsh chat`` in a pty until its editor shows."""
    missing = _missing("pexpect", "pyte", "textual")
    if missing:
        return LAUNCH.skip(missing)
    runs = opts.reps(11, 3)
    figures = []
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        patch = _patch(tmp, [])
        baseline = PythonPass(environ, tmp)
        for run in range(runs + 1):  # the first round seeds the profile and bytecode
            if run:
                baseline.sample()
            pty = _Pty(["--patch", str(patch), "chat"], environ, tmp)
            try:
                figures.append(pty.wait(READY_MARK) - pty.t0)
                pty.wait("sandbox:")  # the runtime and the doctor answered: a whole start
            finally:
                pty.close()
    return LAUNCH.measure(median_ms(figures[1:]), runs=runs,
                          python_pass_ms=baseline.median_ms)


@benchmark("chat_keystroke_echo_streaming", ECHO)
def chat_echo(opts: Options) -> Result:
    """Keys typed while a long answer streams, each to its echo on the screen."""
    missing = _missing("pexpect", "pyte", "textual")
    if missing:
        return ECHO.skip(missing)
    keys = opts.reps(25, 10)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        answer = "".join(f"Paragraph {i}: " + "streamed words " * 12 + "\n\n"
                         for i in range(1500))
        # A delta every millisecond (~16,000 characters a second, fifty times a fast
        # model's pace): a stream that never lets up for the whole measurement, where one
        # with no pause at all is over before the keys are typed.
        patch = _patch(tmp, [{"text": answer, "chunk_delay_ms": 1}], chunk=16)
        baseline = PythonPass(environ, tmp)
        pty = _Pty(["--patch", str(patch), "chat"], environ, tmp)
        figures, idle = [], []
        try:
            pty.wait("sandbox:")
            idle = _echoes(pty, keys, baseline)
            pty.child.send("\x7f" * keys)  # the editor empty again
            pty.wait(READY_MARK)
            pty.child.send("go\r")
            pty.wait("Paragraph ")
            letters = "abcdefghijklmnopqrstuvwxy"
            typed = ""
            for index in range(keys):
                if pty.shows("Paragraph 1499"):
                    raise RuntimeError("the answer ended before every key was timed")
                typed += letters[index % len(letters)]
                t0 = time.perf_counter()
                pty.child.send(typed[-1])
                pty.wait(f"│ {typed}", timeout=10)
                figures.append(time.perf_counter() - t0)
                baseline.sample()
        finally:
            pty.close()
    return ECHO.measure(median_ms(figures), runs=len(figures),
                        python_pass_ms=baseline.median_ms,
                        max_ms=round(ms(max(figures)), 2), idle_ms=median_ms(idle))


def _echoes(pty: _Pty, keys: int, baseline: PythonPass) -> list[float]:
    """``keys`` keys typed into an idle chat, each to its echo (seconds)."""
    typed, figures = "", []
    for index in range(keys):
        typed += "zyxwvutsrqponmlkjihgfedcb"[index % 25]
        t0 = time.perf_counter()
        pty.child.send(typed[-1])
        pty.wait(f"│ {typed}", timeout=10)
        figures.append(time.perf_counter() - t0)
        baseline.sample()
    return figures


_HEADLESS = r'''
import asyncio, json, sys, time
from pathlib import Path
from dsh.chat.app import ChatApp
from dsh.chat.options import ChatOptions

mode, home, patch, cwd = sys.argv[1:5]

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

async def main():
    app = ChatApp(ChatOptions("chat", Path(home), (patch,), Path(cwd)))
    async with app.run_test(size=(100, 30)) as pilot:
        await asyncio.wait_for(app.ready.wait(), 120)
        await pilot.pause(0.2)
        if mode == "delta":
            para = ("The function reads the file, *parses* each line into a record and keeps "
                    "the ones whose `status` is active; errors are collected, not raised, so "
                    "one bad line does not stop the import. ") * 2
            piece = ("## Step\n\n" + para + "\n\n" + para + "\n\n- a first item\n"
                     "- a second item\n- a third item\n\n| field | kind |\n|---|---|\n"
                     "| status | str |\n| count | int |\n\n```python\ndef load(path):\n"
                     "    with open(path) as f:\n        return [parse(x) for x in f]\n"
                     "```\n\n" + para + "\n\n")
            text = (piece * 100)[:3000 * 16]
            deltas = [text[i:i + 16] for i in range(0, len(text), 16)]
            await app.event({"type": "turn/start", "data": {"turn": 1}})
            await app.event({"type": "step/start", "data": {"turn": 1, "step": 1}})
            t0 = time.perf_counter()
            for delta in deltas:  # as the runtime's frames come: the loop runs in between
                await app.event({"type": "assistant/delta", "data": {"text": delta}})
                await asyncio.sleep(0)
            await app.answer.settle()
            await pilot.pause()
            elapsed = time.perf_counter() - t0
            print(json.dumps({"per_delta_s": elapsed / len(deltas), "deltas": len(deltas)}))
        else:
            answer = ("Here is **what I found**:\n\n1. the first point, in a sentence or "
                      "two of ordinary length\n2. a second point\n\n```python\ndef f(x):\n"
                      "    return x * 2\n```\n\nAnd a closing paragraph that says what to "
                      "do next, with `inline code` and a [link](https://example.com).\n")
            for turn in range(500):
                await app.event({"type": "turn/start", "data": {"turn": turn + 1}},
                                replay=True)
                await app.event({"type": "step/start", "data": {"turn": turn + 1, "step": 1}},
                                replay=True)
                await app.event({"type": "user/message", "data": {
                    "source": {"kind": "user"}, "id": f"m{turn}",
                    "content": [{"type": "text", "text": f"question {turn}: what next?"}]}},
                    replay=True)
                await app.event({"type": "assistant/message", "data": {"message": {
                    "content": [{"type": "text", "text": answer}]}}}, replay=True)
                await app.event({"type": "turn/end", "data": {"reason": {
                    "kind": "completed"}}}, replay=True)
                if turn % 50 == 0:
                    await pilot.pause()
            await pilot.pause(0.5)
            print(json.dumps({"rss_mb": rss(), "widgets": len(app.transcript.children)}))
        await app.link.close()
        app.exit(0)

asyncio.run(main())
'''


def _headless(mode: str, environ: dict[str, str], tmp: str) -> dict[str, float]:
    patch = _patch(tmp, [])
    return timed_python(_HEADLESS, environ, tmp, mode, str(Path(tmp, "home")), str(patch),
                        tmp)


@benchmark("chat_delta_render", DELTA)
def chat_delta(opts: Options) -> Result:
    """Streamed deltas through the chat's handler and markdown widget, per delta."""
    missing = _missing("textual")
    if missing:
        return DELTA.skip(missing)
    runs = opts.reps(5, 2)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        baseline = PythonPass(environ, tmp)
        figures = []
        for _ in range(runs):
            baseline.sample()
            figures.append(_headless("delta", environ, tmp)["per_delta_s"])
    return DELTA.measure(ms(statistics.median(figures)), runs=runs,
                         python_pass_ms=baseline.median_ms)


@benchmark("chat_memory_1000_messages", MEMORY)
def chat_memory(opts: Options) -> Result:
    """The chat's resident memory with a 1,000-message transcript drawn."""
    missing = _missing("textual")
    if missing:
        return MEMORY.skip(missing)
    runs = opts.reps(3, 1)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        environ = installed_environ(tmp)
        found = [_headless("memory", environ, tmp) for _ in range(runs)]
    return MEMORY.measure(statistics.median(f["rss_mb"] for f in found), runs=runs,
                          widgets=int(found[0]["widgets"]))
