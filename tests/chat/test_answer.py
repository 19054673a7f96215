"""The streamed answer (dsh.chat.answer): drawn in parts so a frame costs the live part
only, and drawn exactly as the whole answer in one renderable would be.

Driven in-process by Textual's pilot (as the screenshots are); the screen is read back as
text, row by row.
"""

from __future__ import annotations

import asyncio
import random

import pytest

pytest.importorskip("textual", reason="the chat extra (pip install 'dsh-harness[chat]')")

from textual.app import App, ComposeResult
from textual.containers import VerticalScroll

from dsh.chat.answer import FRAME_S, PART_BLOCKS, Answer, SettledAnswer, split
from dsh.chat.safety import markdown_parser

PARAGRAPH = ("The function reads the file, *parses* each line into a record and keeps the "
             "ones whose `status` is active. ")
PIECE = ("## Step\n\n" + PARAGRAPH + "\n\n- a first item\n- a second item\n  - nested\n\n"
         "| field | kind |\n|---|---|\n| status | str |\n\n```python\ndef load(path):\n"
         "    return 1\n```\n\n> quoted\n> on two lines\n\n---\n\n# Big\n\n" + PARAGRAPH
         + "\n\n1. one\n2. two\n\nSetext heading\n--------------\n\n    indented code\n\n"
         "A [link](https://example.com) and **bold**.\n\n")
TEXT = PIECE * 5 + "The end, with an escape \x1b[2J that must show, not clear.\n"


class Shell(App[None]):
    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="column")


async def _screen(streamed: bool, seed: int = 0) -> tuple[list[str], list[str]]:
    """The rows the app shows, and the parts' sources (streamed) or [] (whole)."""
    app = Shell()
    async with app.run_test(size=(80, 700)) as pilot:
        column = app.query_one("#column")
        sources: list[str] = []
        if streamed:
            answer = Answer()
            await column.mount(answer)
            rng, at = random.Random(seed), 0
            while at < len(TEXT):
                size = rng.randint(1, 80)
                answer.add(TEXT[at:at + size])
                at += size
                # deltas come faster or slower than frames
                await pilot.pause(FRAME_S if rng.random() < 0.3 else 0)
            await answer.settle()
            sources = [part.source for part in answer.parts]
        else:
            await column.mount(SettledAnswer(TEXT))
        await pilot.pause(0.2)
        # the screen as the compositor draws it (Textual has no public text export)
        rows = ["".join(s.text for s in strip).rstrip()
                for strip in app.screen._compositor.render_strips()]
    return rows, sources


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_streamed_answer_draws_exactly_as_the_whole_answer(seed: int) -> None:
    whole, _ = asyncio.run(_screen(False))
    streamed, sources = asyncio.run(_screen(True, seed))
    assert "".join(sources) == TEXT  # every delta in a part, once, in order
    assert len(sources) > 3  # it was drawn in parts ...
    assert streamed == whole  # ... that join as one renderable would
    shown = "\n".join(whole)
    assert "Step" in shown and "## Step" not in shown and "┌" in shown and "│ status" in shown
    assert "1. one" in shown and "• a first item" in shown and "▌ quoted" in shown
    assert "link (https://example.com)" in shown and "^[[2J" in shown


def test_parts_hold_a_bounded_number_of_blocks() -> None:
    parser = markdown_parser()
    pieces = split(TEXT)
    assert "".join(text for text, _ in pieces) == TEXT
    for text, _ in pieces:
        blocks = [t for t in parser.parse(text) if t.level == 0 and t.nesting >= 0]
        assert 0 < len(blocks) <= PART_BLOCKS
    assert pieces[0][1] is None and all(after for _, after in pieces[1:])
    assert split("") == [("", None)]
