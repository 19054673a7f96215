"""Nothing the chat did not write itself reaches the terminal as a control.

Every string from the model, a file, a tool, a session title or the runtime's messages is
foreign: it may hold escape sequences that clear the screen, set the window title, write
the clipboard (OSC 52) or move the cursor. The chat shows such text only through
:func:`text` (a :class:`rich.text.Text`, never markup, so ``[bold]`` stays literal) or
:func:`markdown_parser`, after :func:`dsh.core.termtext.visible` has turned every control
into printable characters (``^[``).

Markdown needs more than cleaning its source: the parser decodes character references
(``&#27;`` is ESC, ``&#x9b;`` an 8-bit CSI) and percent-decodes nothing it shows, so a
source free of controls can still produce them. :class:`SafeMarkdownIt` cleans what the
parser made (every token's text, its children, and its attributes: a link's ``href`` and
``title``, a fence's ``info``) before the renderer sees it; the chat draws markdown from
its tokens only (:mod:`dsh.chat.mdview`, Textual's Markdown for ``/help``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from rich.text import Text

from dsh.core.termtext import visible

__all__ = ["SafeMarkdownIt", "clean", "line", "markdown_parser", "text"]


def clean(value: Any) -> str:
    """``value`` as a string with every terminal control shown, none obeyed."""
    return visible(value if isinstance(value, str) else str(value))


def line(value: Any) -> str:
    """:func:`clean`, on one line (line feeds and tabs shown too): titles, arguments."""
    return visible(value if isinstance(value, str) else str(value), one_line=True)


def text(value: Any, style: str = "", *, one_line: bool = False) -> Text:
    """Foreign ``value`` as a rich Text in ``style``: cleaned, and never read as markup."""
    return Text(line(value) if one_line else clean(value), style=style)


class SafeMarkdownIt(MarkdownIt):
    """A markdown-it parser whose tokens carry no terminal control, whatever the source."""

    def parse(self, src: str, env: Any = None) -> list[Token]:
        """Parse the cleaned ``src`` and clean every token the parser made."""
        tokens = super().parse(clean(src), env)
        _scrub(tokens)
        return tokens


def _scrub(tokens: Iterable[Token]) -> None:
    for token in tokens:
        if token.content:
            token.content = clean(token.content)
        if token.info:
            token.info = line(token.info)
        if token.attrs:
            token.attrs = {k: line(v) if isinstance(v, str) else v
                           for k, v in token.attrs.items()}
        if token.children:
            _scrub(token.children)


def markdown_parser() -> MarkdownIt:
    """The parser the chat's markdown is read with: GitHub-like (tables, strikethrough),
    cleaned (:class:`SafeMarkdownIt`). Raw HTML is shown as text, never interpreted. Bare
    addresses are not made links: a file name such as ``setup.py`` or ``main.rs`` reads
    as a domain, and a terminal finds a real URL in the text by itself."""
    return SafeMarkdownIt("gfm-like", {"html": False, "linkify": False})
