"""Text from elsewhere made safe to print on a terminal: every control shown, none obeyed.

Whatever dsh prints that it did not write itself (a model's answer, a file's contents, a
tool's output, a peer's error message, a session title) may carry terminal controls: an
escape sequence that clears the screen (``ESC [ 2 J``), sets the window title
(``ESC ] 0 ; ... BEL``), writes the clipboard (OSC 52), moves the cursor to overwrite a line
already shown, or a bare carriage return that hides what came before it on the line. A file
in a cloned repository must not be able to do any of that to the person reading dsh's
output, so every place that writes such text to a terminal passes it through
:func:`visible` first, and styles it (colours, bold) only afterwards, with its own codes.

What :func:`visible` does, character by character (one ``str.translate``, so it costs
little on a stream of deltas and needs no state between them):

* C0 controls and DEL become caret notation, as ``cat -v`` shows them: ESC is ``^[``, so
  ``ESC [ 2 J`` prints as the harmless ``^[[2J``; BEL is ``^G``; NUL is ``^@``; DEL ``^?``.
  Tab and line feed stay. A carriage return stays only as part of ``CR LF`` (which
  becomes ``LF``); alone it is ``^M``, since it returns the cursor over what was printed.
* C1 controls (U+0080 to U+009F; U+009B is an 8-bit CSI, U+009D an 8-bit OSC on terminals
  that honour them) become ``<U+009B>`` and the like.
* The Unicode bidirectional formatting characters (U+202A to U+202E, U+2066 to U+2069),
  which reorder what is shown so that text reads differently from what it is ("Trojan
  Source"), become ``<U+202E>`` and the like.

``one_line=True`` also shows line feeds and tabs (``^J``, ``^I``), for text that must stay
on one line of a listing, such as a session title.
"""

from __future__ import annotations

__all__ = ["visible"]

_BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _caret(code: int) -> str:
    return "^" + chr(code ^ 0x40)


def _table(*, one_line: bool) -> dict[int, str]:
    table = {code: _caret(code) for code in (*range(0x20), 0x7F)}
    if not one_line:
        del table[ord("\t")], table[ord("\n")]
    table.update({code: f"<U+{code:04X}>" for code in (*range(0x80, 0xA0), *_BIDI)})
    return table


_MULTI_LINE = _table(one_line=False)
_ONE_LINE = _table(one_line=True)


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` with every terminal control shown as printable characters, none obeyed.

    Line feeds and tabs are kept unless ``one_line``; ``CR LF`` becomes ``LF``.
    """
    if one_line and text.isprintable():
        # Every character changed here is unprintable (controls, format characters), so
        # printable text is returned as it is: a listing of 10,000 titles pays a test.
        return text
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return text.translate(_ONE_LINE if one_line else _MULTI_LINE)
