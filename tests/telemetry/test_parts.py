"""Telemetry's small parts: the recorder's own thread, and the pause after a failed export."""

from __future__ import annotations

import logging
import threading

import pytest

from dsh.runtime.telemetry.exporting import MAX_PAUSE_S, PAUSE_S, Tally
from dsh.runtime.telemetry.later import Later


def test_later_runs_calls_in_order_on_its_thread_and_close_runs_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    ran: list[tuple[int, str]] = []
    later = Later(interval=3600)  # nothing runs before close: close must drain

    def note(n: int) -> None:
        ran.append((n, threading.current_thread().name))

    def broken() -> None:
        raise RuntimeError("no")

    later(note, 1)
    later(broken)
    later(note, 2)
    assert ran == []
    with caplog.at_level(logging.ERROR, logger="dsh.telemetry"):
        later.close()
    assert [n for n, _ in ran] == [1, 2]  # in order, past a failing call
    assert "recording broken failed" in caplog.text

    quick = Later(interval=0.01)
    done = threading.Event()
    quick(lambda: (ran.append((3, threading.current_thread().name)), done.set()))
    assert done.wait(30)
    quick.close()
    assert ran[-1] == (3, "dsh-telemetry")


def test_a_failed_export_pauses_the_next_ones_doubling_until_a_success(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("dsh.runtime.telemetry.exporting.time.monotonic", lambda: now[0])
    tally = Tally("spans", "http://collector:4318")
    assert not tally.paused()
    tally.record(5, False)
    assert tally.paused() and (tally.failed, tally.failures) == (5, 1)
    now[0] += PAUSE_S
    assert not tally.paused()
    tally.record(5, False)  # the pause doubles
    now[0] += PAUSE_S
    assert tally.paused()
    now[0] += PAUSE_S
    assert not tally.paused()
    for _ in range(20):
        tally.record(1, False)
    now[0] += MAX_PAUSE_S - 0.001
    assert tally.paused()
    now[0] += 0.002
    tally.record(3, True)  # a success: no pause, and the next failure pauses briefly again
    assert not tally.paused() and tally.sent == 3
    tally.record(1, False)
    now[0] += PAUSE_S
    assert not tally.paused()
