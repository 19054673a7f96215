"""The terminal view's pure parts: widths in cells, clipping, streamed text made visible,
and the turn's usage line (no terminal needed)."""

from __future__ import annotations

from dsh.runtime.headless.live import _Visible, cells, head, tail
from dsh.runtime.headless.tally import Tally, duration, money


def test_cells_count_wide_and_combining_characters() -> None:
    assert [cells(c) for c in "a日\u0301🙂"] == [1, 2, 0, 2]


def test_head_and_tail_fit_the_width_in_cells() -> None:
    assert head("short", 10) == "short"
    assert head("abcdefghij", 5) == "abcd…"
    assert head("日本語テキスト", 7) == "日本語…"  # 6 cells and the mark
    assert tail("abcdefghij", 5) == "…ghij"
    assert tail("テキストの終わり", 5) == "…わり"
    assert sum(map(cells, head("日本語テキスト" * 20, 41))) <= 41


def test_a_carriage_return_split_across_deltas() -> None:
    stream = _Visible()
    assert stream.feed("line one\r") == "line one"
    assert stream.feed("\nline two\r") == "\nline two"
    assert stream.feed("over") == "^Mover"  # a bare CR: shown, it would overwrite
    assert stream.feed("\x1b[2J") == "^[[2J"
    assert stream.feed("end\r") == "end" and stream.flush() == "^M"


def event(kind: str, **data: object) -> dict:
    return {"type": kind, "data": data}


def test_the_tally_adds_a_turns_usage() -> None:
    tally = Tally()
    for item in (
        event("step/start"), event("request/context", model="deepseek-flash"),
        event("assistant/message", message={"source": {"model": "deepseek-flash"}},
              usage={"inputTokens": 10000, "outputTokens": 200, "cacheHitTokens": 8000,
                     "costUsd": 0.0012, "reasoningTokens": 50}),
        event("step/start"),
        event("assistant/message", message={},
              usage={"inputTokens": 12000, "outputTokens": 300, "cacheHitTokens": 11000,
                     "costUsd": 0.0009}),
    ):
        tally.add(item)
    assert (tally.steps, tally.input_tokens, tally.cached_tokens, tally.output_tokens,
            tally.reasoning_tokens) == (2, 22000, 19000, 500, 50)
    assert tally.line(4.24) == ("deepseek-flash · 2 steps · 22,000 in (86% cached) · "
                                "500 out · $0.0021 · 4.2s")


def test_what_was_never_reported_is_said_to_be_unknown() -> None:
    tally = Tally()
    tally.add(event("step/start"))
    tally.add(event("assistant/message", message={},
                    usage={"inputTokens": 7, "outputTokens": 2, "estimated": True}))
    assert tally.line(75) == "model unknown · 1 step · ~7 in · ~2 out · cost unknown · 1m 15s"


def test_money_and_duration() -> None:
    assert money(0.00012) == "$0.0001" and money(12.345) == "$12.35"
    assert duration(0.04) == "0.0s" and duration(3600) == "60m 00s"


def test_json_to_a_terminal_escapes_what_json_leaves_raw() -> None:
    import json

    from dsh.runtime.headless.views import json_line

    value = {"text": "a\x1b[2J\x9b2J\u202e\x7f日本"}
    assert json_line(value, terminal=False) == json.dumps(
        value, ensure_ascii=False, separators=(",", ":"))
    shown = json_line(value, terminal=True)
    assert shown == '{"text":"a\\u001b[2J\\u009b2J\\u202e\\u007f日本"}'
    assert json.loads(shown) == value
