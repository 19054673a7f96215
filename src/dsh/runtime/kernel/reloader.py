"""Live patch reload: watch the user layers, recompose, reconcile the running tree.

Started by :mod:`dsh.runtime.app` only for ``patch-reload = "live"`` profiles, so a
``startup`` profile has no watcher thread and no OS watch handle at all.

One thread (``dsh-reload-watcher``) blocks in :func:`watchfiles.watch` on the *parent
directories* of the user layer files (the profile's and the home's ``patch.yml``), because
the files themselves may not exist yet and editors often replace a file instead of writing
it; events are filtered down to exactly those two paths, so creation and deletion count.
Each batch is handed to the event loop, where refreshes run one at a time: a batch that
arrives while a refresh runs marks it dirty and it re-runs once, with the newest files.

A refresh reads the files, skips byte-identical content, recomposes the whole stack in a
worker thread (``launch.recompose``: bundle and ``--patch`` layers cached from boot) and
calls the kernel's transactional ``reconcile``. The row serving this process (the one
that registered ``main``, owning stdio) is pinned: a change that would replace or dispose
it is refused, since frames in flight would be lost. Any failure keeps the last good
tree, logs one line naming the file, and emits ``config.reload_failed`` through the
kernel context's :class:`~dsh.runtime.kernel.configstate.ConfigState`; success updates the
effective config and emits ``config.reloaded``. Turns in flight keep the objects they
started with (a config-only change is taken in place and applies from the next turn).

Plugin *code* is never hot-reloaded: new modules load, loaded ones stay as they are.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dsh.core.errors import DshError
from dsh.runtime.kernel.configstate import ConfigState

STEP_MS = 20
"""How long the watcher waits for more events before handing a batch over (latency)."""
DEBOUNCE_MS = 400
"""The longest one batch may keep gathering events (a file written in many pieces)."""
TIMEOUT_MS = 500
"""The watcher reports "nothing happened" this often; the first report means it is
armed, and the files are compared once more then, so an edit made while it was still
arming is not lost."""
THREAD_NAME = "dsh-reload-watcher"

log = logging.getLogger("dsh.reload")


def _key(path: str | os.PathLike[str]) -> str:
    """A comparable form of a path that may not exist (its parent resolved)."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


class Reloader:
    """Keeps a running kernel in step with the live user layers of its launch."""

    def __init__(self, launch: Any, kernel: Any, state: ConfigState) -> None:
        self._launch = launch
        self._kernel = kernel
        self._state = state
        self._files = tuple(Path(p) for p in launch.watch_files)
        self._keys = {_key(p): p for p in self._files}
        self._contents = {p: _read(p) for p in self._files}
        self._pending: set[Path] = set()
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching (call on the running loop, after the kernel started)."""
        self._loop = asyncio.get_running_loop()
        dirs = sorted({str(p.parent) for p in self._files if p.parent.is_dir()})
        if not dirs:
            return
        self._thread = threading.Thread(target=self._watch, args=(dirs,), name=THREAD_NAME,
                                        daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Stop the watcher and wait for a refresh in progress (it is transactional)."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 2.0)

    # -- the watcher thread --------------------------------------------------------------

    def _watch(self, dirs: list[str]) -> None:
        from watchfiles import watch

        def wanted(_change: Any, path: str) -> bool:
            return _key(path) in self._keys

        armed = False
        assert self._loop is not None
        try:
            for changes in watch(*dirs, watch_filter=wanted, debounce=DEBOUNCE_MS,
                                 step=STEP_MS, rust_timeout=TIMEOUT_MS, yield_on_timeout=True,
                                 stop_event=self._stop, recursive=False,
                                 raise_interrupt=False):
                paths = {self._keys[_key(path)] for _, path in changes}
                if paths or not armed:
                    self._loop.call_soon_threadsafe(self._changed, paths)
                armed = True
        except Exception as exc:  # the watcher is a convenience: the runtime goes on
            if not self._stop.is_set():
                log.error("live reload stopped: %s: %s", type(exc).__name__, exc)

    # -- on the loop ---------------------------------------------------------------------

    def _changed(self, paths: Iterable[Path]) -> None:
        if self._stop.is_set():
            return
        self._pending.update(paths)
        if self._task is not None and not self._task.done():
            self._dirty = True
            return
        self._task = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        """Refresh until no batch arrived during the last refresh (coalescing)."""
        while True:
            self._dirty = False
            paths, self._pending = self._pending, set()
            await self._refresh(paths)
            if not self._dirty or self._stop.is_set():
                return

    async def _refresh(self, paths: set[Path]) -> None:
        contents = await asyncio.to_thread(lambda: {p: _read(p) for p in self._files})
        if contents == self._contents:
            return  # touched, or rewritten with the same bytes
        changed = [p for p in self._files if contents[p] != self._contents.get(p)]
        self._contents = contents
        file = str(changed[0] if changed else next(iter(paths), self._files[0]))
        try:
            rows, effective = await asyncio.to_thread(self._recompose)
            keep = [row for row in (self._kernel.command_row("main"),) if row is not None]
            diff = await self._kernel.reconcile(rows, keep=keep)
        except DshError as exc:
            self._fail(str(exc), file, "restart required" in str(exc))
            return
        except Exception as exc:  # a plugin bug must not end the runtime
            self._fail(f"{type(exc).__name__}: {exc}", file, False)
            return
        self._state.reloaded(effective, {
            name: sorted(getattr(diff, name))
            for name in ("updated", "replaced", "added", "removed")
        })
        log.info("reloaded %s", file)

    def _recompose(self) -> Any:
        """Re-read the user layers; newly installed plugins become importable."""
        from dsh.runtime.kernel.loader import entry_point_table

        importlib.invalidate_caches()
        entry_point_table.cache_clear()
        return self._launch.recompose()

    def _fail(self, message: str, file: str, restart_required: bool) -> None:
        text = message if message.startswith(file) else f"{file}: {message}"
        log.error("config reload failed, last good tree kept: %s", text)
        self._state.failed(message, file, restart_required=restart_required)
