"""How the chat draws markdown: a run of blocks as one rich renderable, in the app's theme.

An answer is drawn by rich's markdown renderer, one widget for many blocks, where
Textual's Markdown widget makes a widget (often several) per block: a streamed answer of
hundreds of blocks then cost a layout of all of them on every frame, and a thousand
messages a thousand widgets or more. The look follows Textual's own markdown, from the
theme's variables (its heading colours and styles, inline code on a tinted ground, bullets
and quote bars in the primary text colour), with tables drawn in borders, code blocks
highlighted (a dark or a light pygments theme) and links shown with their address, which
a terminal can open. The source is parsed by the chat's safe parser
(:func:`dsh.chat.safety.markdown_parser`), so no token carries a terminal control and raw
HTML is text.

An answer is drawn in parts (:mod:`dsh.chat.answer`); a part after the first says what
ended the part before it (``after``), so the parts join with exactly the blank lines one
renderable would put between those blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from markdown_it.token import Token
from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import BlockQuote, ListItem, Markdown, TableElement
from rich.segment import Segment
from rich.table import Table
from rich.theme import Theme
from textual.color import Color

from dsh.chat.safety import markdown_parser

LEAF_BLOCKS = frozenset({"paragraph_open", "heading_open", "fence", "code_block", "hr"})
"""Top-level blocks rich sets off from the block before with a blank line of the
renderable's own (one holding blocks, a list or a quote, brings its own)."""

_PARSER = markdown_parser()


class Look(NamedTuple):
    """The styles markdown is drawn in (rich's ``markdown.*`` style names)."""

    theme: Theme
    code_theme: str


def look(variables: Mapping[str, str], *, dark: bool) -> Look:
    """The look of Textual's markdown in the theme whose variables are ``variables``
    (``App.theme_variables``): colours with an alpha are blended over its background."""
    background = _color(variables.get("background"), "#121212" if dark else "#efefef")

    def color(name: str, fallback: str, alpha: float = 1.0) -> str:
        value = _color(variables.get(name), fallback)
        return (background + value.multiply_alpha(alpha)).hex

    def heading(level: int) -> str:
        style = variables.get(f"markdown-h{level}-text-style", "bold")
        color_of = color(f"markdown-h{level}-color", color("foreground", "#e0e0e0"))
        return f"{'' if style == 'none' else style} {color_of}".strip()

    accent = color("text-primary" if dark else "text-secondary", "#57a5e2")
    code = (f"{color('text-warning', '#ffc473')} on {color('warning', '#fea62b', 0.1)}"
            if dark else f"{color('text-error', '#7a273c')} on {color('error', '#b93c5b', 0.05)}")
    muted = color("foreground-muted", "#a0a0a0")
    styles = {f"markdown.h{level}": heading(level) for level in range(1, 7)}
    styles.update({
        "markdown.code": code,
        "markdown.block_quote": muted,
        "markdown.block_quote.bar": accent,
        "markdown.item.bullet": accent,
        "markdown.item.number": accent,
        "markdown.link": f"underline {accent}",
        "markdown.link_url": muted,
        "markdown.hr": color("secondary", "#004578"),
        "markdown.table.border": color("foreground", "#e0e0e0", 0.3),
        "markdown.table.header": f"bold {accent}",
    })
    return Look(Theme(styles), "monokai" if dark else "friendly")


def _color(value: str | None, fallback: str) -> Color:
    """``value`` as Textual reads a colour (``ansi_red`` too), else ``fallback``."""
    try:
        return Color.parse(value) if value else Color.parse(fallback)
    except Exception:
        return Color.parse(fallback)


class _Table(TableElement):
    """A table in borders, a line between rows (as Textual's markdown draws one)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = Table(box=box.SQUARE, show_lines=True, style="markdown.table.border",
                      header_style="markdown.table.header")
        if self.header is not None and self.header.row is not None:
            for column in self.header.row.cells:
                table.add_column(column.content.copy())
        if self.body is not None:
            for row in self.body.rows:
                table.add_row(*(cell.content for cell in row.cells))
        yield table


class _Quote(BlockQuote):
    """A quote behind a bar in the accent colour, its text muted."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        inner = options.update(width=options.max_width - 2)
        bar = Segment("▌ ", console.get_style("markdown.block_quote.bar"))
        for line in console.render_lines(self.elements, inner, style=self.style):
            yield bar
            yield from line
            yield Segment.line()


class _Item(ListItem):
    """A list item; a numbered one as ``1.``, as the source writes it."""

    def render_number(self, console: Console, options: ConsoleOptions, number: int,
                      last_number: int) -> RenderResult:
        width = len(str(last_number)) + 3
        lines = console.render_lines(self.elements, options.update(
            width=options.max_width - width), style=self.style)
        style = console.get_style("markdown.item.number", default="none")
        numeral = Segment(f"{number}.".rjust(width - 1) + " ", style)
        padding = Segment(" " * width, style)
        for index, line in enumerate(lines):
            yield numeral if index == 0 else padding
            yield from line
            yield Segment.line()


def _unlink_autolinks(tokens: list[Token]) -> None:
    """``<https://…>`` as its address once: rich would write a link's text and then its
    address, the same twice."""
    for token in tokens:
        if token.children:
            token.children = [child for child in token.children
                              if not (child.type in ("link_open", "link_close")
                                      and child.markup == "autolink")]


class ChatMarkdown(Markdown):
    """``source`` drawn in ``look``; ``after``: the type of the block that ended the part
    before this one (None: this is the first)."""

    elements = {**Markdown.elements, "table_open": _Table, "blockquote_open": _Quote,
                "list_item_open": _Item}

    def __init__(self, source: str, look: Look, *, after: str | None = None) -> None:
        super().__init__("", code_theme=look.code_theme, hyperlinks=False)
        self.markup = source
        self.parsed = _PARSER.parse(source)
        _unlink_autolinks(self.parsed)
        self.look = look
        first = next((t.type for t in self.parsed if t.level == 0), None)
        # A heading opening an answer is set off from what came before it, as a heading
        # is inside one (rich would start it on the first line).
        self.lead = (after not in (None, "hr") and first in LEAF_BLOCKS) or (
            after is None and first == "heading_open")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        console.push_theme(self.look.theme)
        try:
            drawn = list(super().__rich_console__(console, options))
        finally:
            console.pop_theme()
        if self.lead:
            yield Segment.line()
        yield from drawn
