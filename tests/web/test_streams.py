"""``dsh.runtime.web.streams``: replay pages shared by every stream, and replaying streams
taking turns, so many streams of a big session neither multiply the work nor starve the
other requests (issue 34: 300 streams made ``/api/status`` take 29 s)."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from dsh.runtime.web.streams import PAGE_BYTES, EventHub, Pages, Turns, frame


def log_of(count: int, size: int = 100) -> list[dict[str, Any]]:
    return [{"seq": i, "type": "assistant/delta", "time": 0, "data": {"text": "x" * size}}
            for i in range(count)]


def replay(pages: Pages, session_id: str, log: list[dict[str, Any]],
           start: int = 0) -> list[bytes]:
    out, seq = [], start
    while seq < len(log):
        data, seq = pages.page(session_id, log, seq)
        out.append(data)
    return out


def test_pages_are_encoded_once_and_shared() -> None:
    log = log_of(3000)
    pages = Pages()
    first = replay(pages, "s", log)
    second = replay(pages, "s", log)
    assert len(first) > 2
    assert all(a is b for a, b in zip(first, second, strict=True))  # the same bytes objects
    assert b"".join(first) == b"".join(
        frame("session.event", {"sessionId": "s", "event": e}) for e in log)
    assert all(len(page) < PAGE_BYTES + 1024 for page in first)


def test_a_page_cut_by_the_log_end_is_remade_once_the_log_grew() -> None:
    log = log_of(10)
    pages = Pages()
    short, end = pages.page("s", log, 0)
    assert end == 10
    log.extend(log_of(20)[10:])
    longer, end = pages.page("s", log, 0)
    assert end == 20 and longer.startswith(short) and len(longer) > len(short)


def test_a_page_of_another_log_under_the_same_id_is_not_served() -> None:
    pages = Pages()
    old, _ = pages.page("s", log_of(5, size=10), 0)
    fresh = log_of(5, size=20)  # the session restored again: new event objects
    data, _ = pages.page("s", fresh, 0)
    assert data != old and b"x" * 20 in data


def test_the_cache_is_bounded() -> None:
    pages = Pages(max_bytes=4 * PAGE_BYTES)
    replay(pages, "s", log_of(20_000))
    assert pages._bytes <= 4 * PAGE_BYTES


def test_turns_let_a_few_pages_through_per_pass_and_skip_the_gone() -> None:
    async def scenario() -> list[int]:
        turns = Turns(per_pass=4)
        waiting = [asyncio.ensure_future(turns.wait()) for _ in range(300)]
        waiting[0].cancel()  # a stream whose client went away
        counts = [0]
        for _ in range(8):
            await asyncio.sleep(0)
            counts.append(sum(1 for w in waiting if w.done() and not w.cancelled()))
        await asyncio.gather(*waiting[1:])
        return counts

    counts = asyncio.run(scenario())
    steps = [b - a for a, b in itertools.pairwise(counts)]
    assert all(0 <= step <= 4 for step in steps), counts
    assert counts[-1] >= 8, counts  # and the line moves on


def test_a_notification_is_framed_once_for_every_stream() -> None:
    async def scenario() -> list[Any]:
        hub = EventHub()
        subs = [hub.subscribe("s") for _ in range(3)]
        other = hub.subscribe("t")
        hub.publish("session.status", {"sessionId": "s", "status": "idle"})
        items = [await sub.next(0.1) for sub in subs]
        assert await other.next(0.01) is False  # another session's stream hears nothing
        for sub in [*subs, other]:
            sub.close()
        assert hub._subs == {}
        return items

    items = asyncio.run(scenario())
    assert all(item[2] is items[0][2] for item in items)
    assert json.loads(items[0][2].split(b"data: ", 1)[1]) == {"sessionId": "s",
                                                              "status": "idle"}
