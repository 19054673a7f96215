"""The model's answer in the transcript: markdown drawn as it streams, at a cost that does
not grow with the answer.

An answer is a column of parts (:class:`AnswerPart`), each a run of at most about
:data:`PART_BLOCKS` top-level blocks drawn as one widget (:mod:`dsh.chat.mdview`). Only
the last part, the *live* one, takes new text: once it holds :data:`PART_BLOCKS` finished
blocks, the next block to start begins a new part. A finished part is never drawn again
(until the terminal's width changes), so a frame parses and draws the live part's few
blocks and lays out the column's parts, however long the answer has grown; and the
screen holds a widget for many blocks, not one or more for each.

Deltas are only collected as they arrive; the live part is brought up to date at most
:data:`FRAME_S` apart (and when the answer settles), so a burst of deltas costs one
redraw, not one each.

A part boundary reads the answer as markdown does across it, except for a reference
link's definition in another part (``[x][ref]`` with ``[ref]: url`` parts away), which
shows as the text it is; answers rarely use them.

Answers before the last :data:`LIVE_ANSWERS` become a :class:`SettledAnswer` each (one
widget an answer, drawn the same way), so a long session stays light.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from textual.widget import Widget
from textual.widgets import Static

from dsh.chat.mdview import ChatMarkdown, Look, look
from dsh.chat.safety import markdown_parser

LIVE_ANSWERS = 3
"""Answers kept in parts; older ones become :class:`SettledAnswer`."""
FRAME_S = 1 / 30
"""How often a streaming answer is redrawn at most."""
PART_BLOCKS = 12
"""Finished blocks in a part before the next block starts another."""

_PARSER = markdown_parser()


_LOOKS: dict[str, Look] = {}


def app_look(widget: Widget) -> Look:
    """The markdown look of ``widget``'s app, in its current theme (made once a theme)."""
    app = widget.app
    found = _LOOKS.get(app.theme)
    if found is None:
        found = _LOOKS[app.theme] = look(app.theme_variables, dark=app.current_theme.dark)
    return found


class AnswerPart(Static):
    """A run of an answer's blocks, drawn as one widget; ``after`` is the type of the
    block that ended the part before it (None: the first part)."""

    DEFAULT_CSS = "AnswerPart { height: auto; }"

    def __init__(self, markdown: str = "", *, after: str | None = None) -> None:
        super().__init__()
        self.source = markdown
        self.after = after

    def on_mount(self) -> None:
        self.redraw()

    def append(self, markdown: str) -> None:
        """Add ``markdown`` at the end (the part is drawn again: a part is small)."""
        self.source += markdown
        self.redraw()

    def redraw(self) -> None:
        """Draw the part in the app's current look."""
        self.update(ChatMarkdown(self.source, app_look(self), after=self.after))


class Answer(Widget):
    """The model's answer, rendered as markdown while it streams (see the module doc)."""

    DEFAULT_CSS = "Answer { layout: vertical; height: auto; margin: 0 0 1 0; }"

    def __init__(self, markdown: str = "") -> None:
        pieces = split(markdown)
        super().__init__(*(AnswerPart(text, after=after) for text, after in pieces))
        self._drawn = markdown  # what the parts hold
        self._pending: list[str] = []  # deltas since (joined once a frame, not each)
        # The live part's text, where its last block starts in it, and how many of its
        # blocks came before that one.
        self._live = pieces[-1][0]
        self._tail_at, self._finished = _tail(self._live)
        self._timer: Any = None
        self._lock = asyncio.Lock()

    @property
    def parts(self) -> list[AnswerPart]:
        """The answer's parts, in order."""
        return [child for child in self.children if isinstance(child, AnswerPart)]

    @property
    def text(self) -> str:
        """The answer so far."""
        return self._drawn + "".join(self._pending)

    def add(self, delta: str) -> None:
        """Take a streamed piece (drawn with the next frame)."""
        self._pending.append(delta)
        if self._timer is None and self.is_mounted:
            self._timer = self.set_interval(FRAME_S, self._frame)

    async def _frame(self) -> None:
        # Shielded: stopping the timer (settle) must not cut a flush in half.
        await asyncio.shield(self._flush())

    async def _flush(self) -> None:
        """Bring the live part up to date with what arrived since the last frame."""
        async with self._lock:
            if not self._pending:
                return
            fresh = "".join(self._pending)
            self._pending.clear()
            self._drawn += fresh
            keep, more = self._cut(fresh)
            if keep:
                self.parts[-1].append(keep)
            if more:
                await self.mount_all([AnswerPart(text, after=after) for text, after in more])

    def _cut(self, fresh: str) -> tuple[str, list[tuple[str, str]]]:
        """``fresh`` as what the live part takes and the new parts it begins (their text
        and the type of the block before each), found by parsing the live part's last
        block with it: the blocks that no longer change are counted, and past
        :data:`PART_BLOCKS` of them a block that starts in ``fresh`` starts a part."""
        old_tail = self._live[self._tail_at:]
        candidate = old_tail + fresh
        offsets = _line_offsets(candidate)
        starts = [(offsets[line], kind) for line, kind in _block_starts(candidate)]
        cuts: list[tuple[int, str]] = []  # (offset in candidate, type of the block before)
        finished = self._finished
        for (_, before), (at, _) in itertools.pairwise(starts):
            finished += 1
            if finished >= PART_BLOCKS and at >= len(old_tail):
                cuts.append((at, before))
                finished = 0
        last_at = starts[-1][0] if starts else 0
        if not cuts:
            self._live += fresh
            self._tail_at += last_at
            self._finished = finished
            return fresh, []
        keep = fresh[:cuts[0][0] - len(old_tail)]
        bounds = [at for at, _ in cuts] + [len(candidate)]
        more = [(candidate[a:b], before) for (a, before), b in zip(cuts, bounds[1:],
                                                                   strict=True)]
        self._live = more[-1][0]
        self._tail_at, self._finished = last_at - cuts[-1][0], finished
        return keep, more

    async def settle(self, final: str | None = None) -> None:
        """The answer is complete: draw what is left; drawn again if ``final`` differs."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        await self._flush()
        if final is not None and final != self.text:
            await self._redraw(final)

    async def reset(self) -> None:
        """Drop what streamed (the runtime asks the model again)."""
        await self.settle()
        await self._redraw("")

    async def _redraw(self, markdown: str) -> None:
        async with self._lock:
            pieces = split(markdown)
            await self.remove_children()
            await self.mount_all([AnswerPart(text, after=after) for text, after in pieces])
            self._drawn, self._pending = markdown, []
            self._live = pieces[-1][0]
            self._tail_at, self._finished = _tail(self._live)

    def restyle(self) -> None:
        """Draw every part again (the app's theme changed)."""
        for part in self.parts:
            part.redraw()


class SettledAnswer(Static):
    """An answer no longer streaming, in one widget: what the transcript keeps of earlier
    turns, so a long session costs a widget an answer (:data:`LIVE_ANSWERS` stay
    :class:`Answer`)."""

    DEFAULT_CSS = "SettledAnswer { margin: 0 0 1 0; }"

    def __init__(self, markdown: str) -> None:
        super().__init__()
        self.text = markdown

    def on_mount(self) -> None:
        self.restyle()

    def restyle(self) -> None:
        """Draw it (again) in the app's current look."""
        self.update(ChatMarkdown(self.text, app_look(self)))


def split(markdown: str) -> list[tuple[str, str | None]]:
    """``markdown`` as its parts: each one's text and the type of the block that ended the
    part before it (None for the first). At least one part, maybe empty."""
    offsets = _line_offsets(markdown)
    starts = _block_starts(markdown)
    pieces: list[tuple[int, str | None]] = [(0, None)]
    blocks = 0
    for (_, before), (line, _) in itertools.pairwise(starts):
        blocks += 1
        if blocks >= PART_BLOCKS:
            pieces.append((offsets[line], before))
            blocks = 0
    ends = [at for at, _ in pieces[1:]] + [len(markdown)]
    return [(markdown[a:b], after) for (a, after), b in zip(pieces, ends, strict=True)]


def _block_starts(markdown: str) -> list[tuple[int, str]]:
    """``(line, token type)`` of each top-level block of ``markdown``, in order."""
    return [(token.map[0], token.type) for token in _PARSER.parse(markdown)
            if token.level == 0 and token.nesting >= 0 and token.map is not None]


def _line_offsets(text: str) -> list[int]:
    """The offset where each line of ``text`` starts (lines end at a line feed only, as
    the parser's do), and one past its end."""
    return [0, *itertools.accumulate(len(x) + 1 for x in text.split("\n"))]


def _tail(markdown: str) -> tuple[int, int]:
    """Where ``markdown``'s last block starts (an offset) and how many blocks precede it."""
    starts = _block_starts(markdown)
    if not starts:
        return 0, 0
    return _line_offsets(markdown)[starts[-1][0]], len(starts) - 1
