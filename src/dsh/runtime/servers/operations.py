"""The operations every protocol server offers, free of any wire format.

The SDK server (JSON-RPC on stdio) and the web server (HTTP) expose the same operations on
the ``agent`` service: sessions, prompt, cancel, history, tools, effective config, status.
What each operation checks and which agent call it makes lives here once, so the two
servers cannot drift apart; a server only turns its wire input into these arguments and
the results into its wire output, and what they raise (:mod:`dsh.core.errors`: a bad
argument is :class:`~dsh.core.errors.InvalidArgumentError`) into its error answers
through the one table, :mod:`dsh.runtime.servers.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from dsh.core.errors import InvalidArgumentError, PluginError
from dsh.runtime.agent.store import event_bytes
from dsh.runtime.kernel.layerfiles import LayerFingerprint
from dsh.runtime.kernel.plugin import RuntimeContext
from dsh.runtime.servers import tally, validation

DEFAULT_PAGE_BYTES = 4 * 1024 * 1024
"""Bytes of event JSON in a ``session/history`` page at most (a server whose frames are
smaller uses half its frame cap): a page stays far below the 16 MiB frame cap however
large its events are."""
ENVELOPE_BYTES = 1024
"""Room a page's answer needs besides its events (the JSON-RPC envelope, ``nextCursor``)."""


class RuntimeView(NamedTuple):
    """What the introspection operations report: the launch's facts, read once when
    serving starts (the layer fingerprint is boot's baseline), and the live tool registry.

    ``current_config`` reads the effective tree as it is now, when live reload provides
    one; without it ``effective_config`` (the tree at boot) is reported. ``modes`` finds
    the session-modes service (``tools-plan``) of the running tree, or None without one.
    """

    profile: str
    patch_reload: str
    effective_config: Mapping[str, Any]
    fingerprint: LayerFingerprint
    tools: Callable[[], list[dict[str, Any]]]
    current_config: Callable[[], Mapping[str, Any]] | None = None
    refused_reload: Callable[[], bool] | None = None
    modes: Callable[[], Any] = lambda: None

    @classmethod
    def of(cls, rt: RuntimeContext) -> RuntimeView:
        """Read the launch the runtime was started with (``rt.launch``)."""
        launch = rt.launch
        if launch is None:
            raise PluginError("a protocol server runs only as a launched application (no launch)")
        registry = getattr(rt, "tools", {})

        def tools() -> list[dict[str, Any]]:
            return [
                {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
                for t in sorted(registry.values(), key=lambda t: t.name)
            ]

        # Live reload moves the tree on; the kernel context's ConfigState holds it as it is now.
        state = getattr(rt, "config_state", None)
        # Files a live profile watches are applied when they change, so they never make a
        # restart necessary by themselves; a reload the reloader had to refuse does.
        watched = set(launch.watch_files)

        def modes() -> Any:
            try:
                return rt.service("modes")
            except PluginError:
                return None

        return cls(
            profile=launch.profile,
            patch_reload=launch.patch_reload,
            effective_config=launch.effective_config,
            fingerprint=LayerFingerprint([p for p in launch.layer_files if p not in watched]),
            tools=tools,
            current_config=(lambda: state.effective_config) if state is not None else None,
            refused_reload=(lambda: state.reload_required) if state is not None else None,
            modes=modes,
        )

    def reload_required(self) -> bool:
        """Whether the running tree no longer matches the files and only a restart helps."""
        refused = self.refused_reload is not None and self.refused_reload()
        return refused or bool(self.fingerprint.changed())

    def config(self) -> Mapping[str, Any]:
        """The effective tree (secret-looking values masked by the launcher)."""
        return self.current_config() if self.current_config is not None else self.effective_config

    def policy_mode(self) -> str | None:
        """The mode of the running tree's enabled ``guardrail-policy`` row (its default
        when it sets none), None without one."""
        for row in _rows(self.config().get("rows", ())):
            if row.get("name") == "guardrail-policy" and not row.get("disabled"):
                config = row.get("config")
                mode = config.get("mode") if isinstance(config, Mapping) else None
                return mode if isinstance(mode, str) else "workspace"
        return None


def _rows(rows: Any) -> Iterator[Mapping[str, Any]]:
    """Every row of an effective tree, group children included."""
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, Mapping):
            yield row
            if row.get("group"):
                yield from _rows(row.get("config"))


class Operations:
    """The protocol-neutral operations, each a checked call on the ``agent`` service."""

    def __init__(self, agent: Any, view: RuntimeView) -> None:
        self.agent = agent
        self.view = view

    async def new_session(self, cwd: str | None, default_cwd: str | None, *,
                          history: Any = None) -> str:
        """Create a session in ``cwd`` (absolute, existing) or the server's default,
        optionally seeded with a copy of another conversation (``history``)."""
        seeded = {} if history is None else {"history": history}
        return await self.agent.new_session(
            cwd=validation.directory(cwd) if cwd else default_cwd, **seeded)

    async def open_session(self, session_id: str, default_cwd: str | None) -> None:
        """Make a session live without a turn: loaded when stored, else created in the
        server's default directory."""
        await self.agent.open_session(session_id, cwd=default_cwd)

    async def prompt(self, session_id: str, blocks: Any, cwd: str | None,
                     meta: Any = None) -> str:
        """Queue a prompt; the new messageId comes back at once, the turn runs in background.
        ``meta`` is the request's ``_meta``: a W3C trace context in it is the turn's parent
        (:func:`~.validation.trace_context`)."""
        trace = validation.trace_context(meta)
        return await self.agent.prompt(session_id, validation.content_blocks(blocks), cwd=cwd,
                                       **({"trace": trace} if trace else {}))

    async def cancel(self, session_id: str) -> bool:
        """Cancel the running turn; False when none runs."""
        return bool(await self.agent.cancel(session_id))

    async def resume(self, session_id: str) -> None:
        """Restore a persisted session; missing or busy sessions fail."""
        await self.agent.resume(session_id)

    def list_sessions(self, narrow: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every known session, sorted by id, with its summary (title, times, turns,
        workspace, usage, cost); ``narrow`` (a request's ``sessionId``, ``workspace``,
        ``limit``: :func:`.validation.listing_filter`) keeps one session, one workspace's,
        or the ones updated last, newest first."""
        return self.agent.list_sessions(**validation.listing_filter(narrow or {}))

    def live_events(self, session_id: str) -> Sequence[Mapping[str, Any]]:
        """The log of a session live in this runtime (SessionNotFoundError otherwise),
        itself, not a copy (read it, never change it): what an event stream replays,
        page by page as it grows, before it goes live."""
        return self.agent.log(session_id)

    def history(self, session_id: str, window: Mapping[str, Any], *,
                max_frame_bytes: int | None = None) -> dict[str, Any]:
        """One page of the session's log: ``{events, nextCursor}`` (null at the end).

        ``window`` holds the request's ``cursor`` and ``limit``. A page holds at most
        :data:`DEFAULT_PAGE_BYTES` of events (half the frame cap when that is less), and
        always its first event; an event that alone would not fit in a frame
        (``max_frame_bytes``) is sent as ``{seq, type, time, omitted: {bytes, reason}}``,
        so no event can make the log unreadable past it.
        """
        start, limit = validation.history_window(window)
        page_bytes = DEFAULT_PAGE_BYTES
        if max_frame_bytes is not None:
            page_bytes = min(page_bytes, max_frame_bytes // 2)
        page = self.agent.history_page(session_id, start_seq=start, limit=limit,
                                       max_bytes=page_bytes)
        events = page.events
        if max_frame_bytes is not None and len(events) == 1:
            size = event_bytes(events[0])
            if size > max_frame_bytes - ENVELOPE_BYTES:
                events = [_omitted(events[0], size, max_frame_bytes)]
        return {"events": events,
                "nextCursor": None if page.next_seq is None else str(page.next_seq)}

    def tools(self) -> list[dict[str, Any]]:
        """Name, description and JSON Schema parameters of every registered tool."""
        return self.view.tools()

    def config(self) -> Mapping[str, Any]:
        """The effective tree, no secret values."""
        return self.view.config()

    async def mode(self, session_id: str) -> dict[str, Any]:
        """``{mode, availableModes}`` of a session (taken here first: unknown is
        SessionNotFoundError, one another runtime holds SessionHeldError)."""
        modes = self._modes()
        await self.agent.take(session_id)
        return {"mode": modes.get(session_id), "availableModes": modes.state(session_id)[
            "availableModes"]}

    async def set_mode(self, session_id: str, mode: Any) -> dict[str, Any]:
        """Put a session in ``mode`` (``default`` or ``plan``); answers ``{mode}``. The
        session is taken here first, so the change is logged under this runtime's lease
        even when the session had gone idle (its lease given back, or unloaded)."""
        modes = self._modes()
        await self.agent.take(session_id)
        before = modes.get(session_id)
        mode = modes.set(session_id, mode)  # an unknown mode: InvalidArgumentError
        if mode != before:
            # In the session's log like the agent's own switch, so a replay shows it too.
            self.agent.emit(session_id, "mode/update", {"mode": mode, "reason": "client"})
        return {"mode": mode}

    # -- a session's own choices -----------------------------------------------------------

    async def settings(self, session_id: str) -> dict[str, Any]:
        """``{provider, model, reasoningEffort, contextWindow, policy, policyDefault,
        policyModes, remembered}``: what the session's next turn and tool calls use."""
        return self._with_policy(await self.agent.settings(session_id))

    async def set_model(self, session_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Switch route, model or effort for the session's next turn (each key optional;
        null goes back to the default), checked now like ``initialize``."""
        given = {key: params[wire] for wire, key in (
            ("provider", "provider"), ("model", "model"),
            ("reasoningEffort", "reasoning_effort")) if wire in params}
        if not given:
            raise InvalidArgumentError('give at least one of "provider", "model", '
                                       '"reasoningEffort"')
        return self._with_policy(await self.agent.set_model(session_id, **given))

    async def set_policy(self, session_id: str, mode: Any) -> dict[str, Any]:
        """Switch the session's policy mode (null: the profile's) from its next call on."""
        return self._with_policy(await self.agent.set_policy(session_id, mode))

    async def forget_decisions(self, session_id: str) -> dict[str, Any]:
        """Forget the session's remembered approvals."""
        return self._with_policy(await self.agent.forget_decisions(session_id))

    def models(self) -> list[dict[str, Any]]:
        """``[{provider, models}]``: each route and the models it names."""
        return self.agent.catalogue()

    def changes(self, session_id: str) -> dict[str, Any]:
        """The files the session's tools wrote or edited, with their diffs."""
        return tally.of(self._log(session_id), tally.Changes())

    def usage(self, session_id: str) -> dict[str, Any]:
        """The session's tokens, cost and context in use so far."""
        return tally.of(self._log(session_id), tally.Usage())

    async def shell(self, session_id: str, command: Any) -> dict[str, Any]:
        """Run the user's own command with the session's shell tool; the model sees it."""
        return await self.agent.shell(session_id, command)

    def _log(self, session_id: str) -> Iterator[dict[str, Any]]:
        """Every event of the session, a page at a time (no lease needed)."""
        start: int | None = 0
        while start is not None:
            page = self.agent.history_page(session_id, start_seq=start, limit=1000,
                                           max_bytes=DEFAULT_PAGE_BYTES)
            yield from page.events
            start = page.next_seq

    def _with_policy(self, settings: dict[str, Any]) -> dict[str, Any]:
        """``settings`` with the profile's own policy mode and the modes there are."""
        from dsh.runtime.tools.policy import MODES

        return {**settings, "policyDefault": self.view.policy_mode(),
                "policyModes": list(MODES)}

    def _modes(self) -> Any:
        modes = self.view.modes()
        if modes is None:
            raise InvalidArgumentError("this profile has no session modes (add a tools-plan "
                                       "row)", code="no-modes")
        return modes

    def status(self, state: str) -> dict[str, Any]:
        """Readiness, and whether a layer file changed since boot (a restart applies it)."""
        return {
            "state": state,
            "profile": self.view.profile,
            "patchReload": self.view.patch_reload,
            "reloadRequired": self.view.reload_required(),
        }


def _omitted(event: Mapping[str, Any], size: int, max_frame_bytes: int) -> dict[str, Any]:
    """The stand-in for an event too large for any frame: what it was, and why it is not
    here (it is kept whole in the store)."""
    return {"seq": event.get("seq"), "type": event.get("type"), "time": event.get("time"),
            "omitted": {"bytes": size, "reason": f"the event is larger than a frame "
                                                 f"({max_frame_bytes} bytes)"}}
