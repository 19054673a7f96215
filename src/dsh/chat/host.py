"""The base of the app's mixins (:mod:`.drawing`, :mod:`.slash`).

They are only ever mixed into :class:`dsh.chat.app.ChatApp`, a Textual ``App[int]``, and
use its members (``run_worker``, ``push_screen_wait``, ``theme``): for the type checker
their base is that ``App``, so those members carry Textual's own types. At run time the
base is ``object``, so the mixins add nothing to the app's method order but their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App

    HostApp = App[int]
else:
    HostApp = object
