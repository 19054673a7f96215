"""The process side of every application: boot the kernel, run ``main``, leave cleanly.

The launcher hands over one resolved :class:`~dsh.config.resolve.Launch`; this module owns the
rest of the process's life, the same way for every profile:

* ``-h``/``--help`` among the application's arguments prints the ``main`` command's help
  after loading (never starting) the plugins, and returns: no transport, no stdin read.
* Otherwise the real stdin/stdout are reserved for the application
  (:func:`dsh.runtime.transports.stdio.reserve_app_stdio`), so logging and stray prints can only
  reach stderr; the kernel starts and ``main`` runs on one asyncio loop.
* The first SIGTERM (Windows: SIGBREAK, from ``CTRL_BREAK_EVENT``; or ``main``
  returning, e.g. on stdin EOF or ``shutdown``) disposes
  the root within :data:`DISPOSE_BOUND` seconds and exits 0; the first SIGINT does the
  same and exits 130. A second signal, or disposal overrunning its bound, exits at once.
  The exit of the SDK program that started the runtime (``DSH_PARENT_PID``,
  :mod:`dsh.runtime.kernel.parentwatch`) counts as a SIGTERM.
* Child processes still alive at the end are killed: none outlives the runtime; and none
  can read the runtime's own environment (:func:`dsh.core.process.protect_parent`).
* The profile's plugin environment (``dsh plugin``) is on ``sys.path`` before anything
  loads; a ``live`` profile gets a :class:`~dsh.runtime.kernel.reloader.Reloader` while running
  (a ``startup`` one never imports it: no watcher thread, no OS watch handle).

Boot failures are raised as :class:`~dsh.core.errors.DshError` subclasses (``ConfigError``
exit 2, ``PluginError`` exit 1) for the launcher's single top-level handler.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from dsh.core.errors import EXIT_INTERRUPTED, EXIT_OK
from dsh.runtime.kernel.parentwatch import watch_parent

if TYPE_CHECKING:
    from dsh.core.launch import Launch

DISPOSE_BOUND = 5.0
_HELP_FLAGS = frozenset({"-h", "--help"})
_EXIT_BY_SIGNAL = {signal.SIGTERM: EXIT_OK, signal.SIGINT: EXIT_INTERRUPTED}
if hasattr(signal, "SIGBREAK"):
    # Windows: CTRL_BREAK_EVENT, how dsh.core.process asks a child's group to end, is SIGTERM's
    # counterpart there (a console's Ctrl-Break too).
    _EXIT_BY_SIGNAL[signal.SIGBREAK] = EXIT_OK

log = logging.getLogger("dsh.app")


def run(launch: Launch) -> int:
    """Run the launch's application to completion and return the process exit code."""
    from dsh.runtime.kernel.kernel import Kernel

    _add_plugin_dir(launch)
    from dsh.core.process import protect_parent

    protect_parent()  # no child reads the runtime's environment through /proc
    # Servers report the launch (effective config, layer files) to their clients.
    kernel = Kernel(launch.rows, profile=launch.profile, home=launch.home, cwd=launch.cwd,
                    env=launch.env, launch=launch)
    kernel.load()
    # The launcher paused the cycle collector for the boot (dsh.cli.main). What booting made is
    # long-lived: file it straight into the oldest generation (freeze, then unfreeze) so
    # that resuming does not rescan all of it in one young collection.
    gc.freeze()
    gc.unfreeze()
    gc.enable()
    main = _main_command(kernel, launch)
    if _HELP_FLAGS.intersection(launch.app_args):
        text = usage_for(main.help, launch.profile)
        text = text if text.endswith("\n") else text + "\n"
        sys.stdout.write(f"{text}\n{launch.help_footer}")
        sys.stdout.flush()
        return EXIT_OK
    from dsh.runtime.transports.stdio import reserve_app_stdio

    reserve_app_stdio()
    _log_to_stderr(launch)
    return _Process(kernel, main, list(launch.app_args)).run()


APPLICATION_BUNDLES = ("dsh-headless", "dsh-sdk-app", "dsh-web-app", "dsh-acp-app")
"""The shipped bundles that add an application (a row registering ``main``) to dsh-base."""


def _main_command(kernel: Any, launch: Launch) -> Any:
    """The ``main`` command; a profile without one is a configuration to fix (exit 2),
    told in one line with the command that fixes it."""
    from dsh.core.errors import ConfigError, PluginError

    try:
        return kernel.command("main")
    except PluginError as exc:
        if kernel.command_row("main") is not None:
            raise
        raise ConfigError(no_application(launch)) from exc


def no_application(launch: Launch) -> str:
    """What to do about a profile whose rows register no ``main`` command."""
    name = launch.profile
    layers = launch.effective_config.get("layers", ()) if launch.effective_config else ()
    bundles = [layer["source"] for layer in layers if layer.get("kind") == "bundle"]
    head = f"profile {name!r} has no application (no row registers command 'main')"
    if any(b in APPLICATION_BUNDLES for b in bundles):
        return (f"{head}: a patch disabled or replaced its application's row; see "
                f"`dsh --profile {name} --dump-config`")
    at = bundles.index("dsh-base") + 1 if "dsh-base" in bundles else 0
    order = " ".join([*bundles[:at], "dsh-headless", *bundles[at:]])
    return (f"{head}: add an application bundle ({', '.join(APPLICATION_BUNDLES)}), "
            f"e.g. `dsh plugin --profile {name} order {order}`")


def _add_plugin_dir(launch: Launch) -> None:
    """Make the profile's plugin environment importable (after everything else, so a
    plugin can never shadow dsh or the packages dsh itself runs on). Added even before
    it exists, so a live profile can use a plugin installed while it runs."""
    plugin_dir = getattr(launch, "plugin_dir", None)
    if plugin_dir is not None:
        from dsh.runtime.kernel.loader import add_plugin_dir

        add_plugin_dir(plugin_dir)


def usage_for(help_text: str, profile: str) -> str:
    """``help_text`` with its usage line naming ``profile``, the one it was asked under.

    A command's help is written for its shipped profile (``usage: dsh --profile sdk``);
    run as ``sdk-minimal`` or a custom profile built on it, the line a user copies must
    name the profile they actually ran.
    """
    first, newline, rest = help_text.partition("\n")
    words = first.split(" ")
    if words[:3] == ["usage:", "dsh", "--profile"] and len(words) > 3:
        words[3] = profile
        first = " ".join(words)
    return first + newline + rest


def _log_to_stderr(launch: Launch) -> None:
    """Logs and warnings go to stderr, at ``DSH_LOG_LEVEL`` (default WARNING), redacted."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_Redacting("dsh: %(levelname)s: %(name)s: %(message)s"))
        root.addHandler(handler)
    level = launch.env.get("DSH_LOG_LEVEL", "WARNING").upper()
    root.setLevel(level if isinstance(logging.getLevelName(level), int) else logging.WARNING)
    logging.captureWarnings(True)


class _Redacting(logging.Formatter):
    """Every log line, traceback included, with credentials inside URLs masked (an access
    log's ``?token=``, a failed request's ``https://user:pass@host``), and the controls
    of whatever it quotes (a peer's error, a tool's output) shown, not obeyed."""

    def format(self, record: logging.LogRecord) -> str:
        from dsh.core.redact import redact
        from dsh.core.termtext import visible

        return visible(redact(super().format(record)))


class _Process:
    """One application run: the loop, the signals, the bounded disposal, the exit code."""

    def __init__(self, kernel: Any, main: Any, argv: list[str]) -> None:
        self._kernel = kernel
        self._main = main
        self._argv = argv
        self._signal_code: int | None = None
        self._main_code = EXIT_OK
        self._main_task: asyncio.Task[int] | None = None
        self._watchdog: threading.Timer | None = None
        self._reloader: Any = None

    def run(self) -> int:
        """Run to the end; the watchdog covers the loop's own teardown too."""
        try:
            return asyncio.run(self._run())
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
            _kill_children()

    @property
    def _code(self) -> int:
        """The exit code as things stand: a signal's, else what ``main`` returned."""
        return self._signal_code if self._signal_code is not None else self._main_code

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        self._install_signals(loop)
        unwatch = watch_parent(loop, lambda: self._on_signal(signal.SIGTERM))
        try:
            await self._kernel.start()
            self._start_reloader()
            self._main_task = loop.create_task(self._main.run(self._kernel.context, self._argv))
            self._main_code = await self._main_task
        except asyncio.CancelledError:
            if self._signal_code is None:
                raise
        finally:
            self._arm_watchdog()
            if self._reloader is not None:
                await self._reloader.stop()
            await self._dispose()
            if unwatch is not None:
                unwatch()
        return self._code

    def _start_reloader(self) -> None:
        launch = self._kernel.context.launch
        if launch is None or launch.patch_reload != "live" or not launch.watch_files:
            return
        from dsh.runtime.kernel.reloader import Reloader

        self._reloader = Reloader(launch, self._kernel, self._kernel.context.config_state)
        self._reloader.start()

    async def _dispose(self) -> None:
        try:
            await asyncio.wait_for(self._kernel.dispose(DISPOSE_BOUND / 2), DISPOSE_BOUND - 0.5)
        except asyncio.TimeoutError:
            log.error("disposal exceeded its %.1f s bound; exiting anyway", DISPOSE_BOUND)

    # -- signals -------------------------------------------------------------------------

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for signum in _EXIT_BY_SIGNAL:
            try:
                loop.add_signal_handler(signum, self._on_signal, signum)
            except NotImplementedError:  # Windows: no loop signal handlers
                signal.signal(
                    signum, lambda s, _f: loop.call_soon_threadsafe(self._on_signal, s)
                )

    def _on_signal(self, signum: int) -> None:
        if self._signal_code is not None:
            _force_exit(128 + signum)
        self._signal_code = _EXIT_BY_SIGNAL[signal.Signals(signum)]
        self._arm_watchdog()
        if self._main_task is not None:
            self._main_task.cancel()
        else:
            # Still starting: cancel the whole run; disposal then follows.
            for task in asyncio.all_tasks():
                task.cancel()

    def _arm_watchdog(self) -> None:
        """Exit for sure once the disposal bound passes, even if the loop is wedged."""
        if self._watchdog is not None:
            return
        self._watchdog = threading.Timer(DISPOSE_BOUND, lambda: _force_exit(self._code))
        self._watchdog.daemon = True
        self._watchdog.start()


def _force_exit(code: int) -> None:
    """Leave now: used for a second signal and for a disposal that overran its bound."""
    _kill_children()
    try:
        sys.stderr.flush()
    finally:
        os._exit(code)


def _kill_children() -> None:
    """Kill whatever child is still alive (:func:`dsh.core.process.kill_children`): tools stop
    their processes on disposal; this is the last line for a forced exit or a plugin that
    forgot. Imported here, at the end: a boot that starts no process never loads it."""
    from dsh.core.process import kill_children

    kill_children()
