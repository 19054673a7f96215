"""The effective config of the running tree, as it is now, and who hears when it changes.

The launch's ``effective_config`` is what the tree was composed from at boot; with live
reload the tree moves on, so servers must not keep that first value. Every kernel
context carries one :class:`ConfigState` (``rt.config_state``): servers read
``effective_config`` when asked and add a listener to forward reload events to their
clients. The reloader is its only writer.

Events (``listener(method, params)``, called on the event loop):

* ``config.reloaded`` ``{diff: {updated, replaced, added, removed}}`` (sorted row ids)
* ``config.reload_failed`` ``{file?, message}``: the last good tree keeps running.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

RELOADED = "config.reloaded"
RELOAD_FAILED = "config.reload_failed"

Listener = Callable[[str, dict[str, Any]], None]

log = logging.getLogger("dsh.config")


class ConfigState:
    """A small mutable holder: the current effective config and its listeners.

    ``reload_required`` is True when a change was refused because only a restart can
    apply it (the row serving the current connection would have been replaced).
    """

    def __init__(self, effective_config: Mapping[str, Any]) -> None:
        self.effective_config: Mapping[str, Any] = effective_config
        self.reload_required = False
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Hear every reload event; returns the function that stops it."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def emit(self, method: str, params: dict[str, Any]) -> None:
        """Tell every listener; one that raises is logged and never stops the others."""
        for listener in list(self._listeners):
            try:
                listener(method, params)
            except Exception:
                log.exception("config listener failed on %s", method)

    def reloaded(self, effective_config: Mapping[str, Any], diff: dict[str, Any]) -> None:
        """The tree now runs ``effective_config``: record it and announce the diff."""
        self.effective_config = effective_config
        self.reload_required = False
        self.emit(RELOADED, {"diff": diff})

    def failed(self, message: str, file: str | None = None, *,
               restart_required: bool = False) -> None:
        """A reload did not apply; the previous tree and config stay."""
        if restart_required:
            self.reload_required = True
        params: dict[str, Any] = {"message": message}
        if file is not None:
            params["file"] = file
        self.emit(RELOAD_FAILED, params)
