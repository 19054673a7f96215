"""The session's offer (dsh.runtime.mcp.offer): budgets across servers and names made
unique, on real McpTool objects (pure: no server runs here)."""

from __future__ import annotations

import zlib
from typing import Any

from dsh.runtime.mcp.config import tool_name
from dsh.runtime.mcp.offer import Notice, offer
from dsh.runtime.mcp.tools import McpTool, parameters


async def _never(name: str, arguments: dict[str, Any]) -> Any:
    raise AssertionError("not called")


def tools(server: str, *names: str, description: str = "") -> dict[str, McpTool]:
    made: dict[str, McpTool] = {}
    for remote in names:
        name = tool_name(server, remote, made)
        made[name] = McpTool(name, {"name": remote, "description": description or remote},
                             parameters({"type": "object"}), server, _never, 1000, str)
    return made


def test_the_session_budget_goes_to_servers_in_order_and_names_each_cut() -> None:
    first, second = tools("a", "x", "y", "z"), tools("b", "p", "q")
    made = offer([("a", first), ("b", second)], max_tools=4, max_bytes=10**6)
    assert list(made.tools) == ["mcp__a__x", "mcp__a__y", "mcp__a__z", "mcp__b__p"]
    assert made.notices == (Notice(
        "error", "b", "MCP server 'b': 1 of its 2 tools left out: the session's servers "
        "together may offer at most 4 tools (max_total_tools = 4); 1 offered",
        "max_total_tools"),)


def test_the_byte_budget_leaves_out_what_does_not_fit_and_keeps_what_does() -> None:
    big = tools("a", "big", description="d" * 500)
    small = tools("b", "s1", "s2")
    room = sum(t.schema_bytes for t in small.values()) + 10
    made = offer([("a", big), ("b", small)], max_tools=100, max_bytes=room)
    assert list(made.tools) == ["mcp__b__s1", "mcp__b__s2"]
    [notice] = made.notices
    assert (notice.kind, notice.server, notice.setting) == ("error", "a",
                                                            "max_total_schema_bytes")
    assert f"at most {room} bytes of names, descriptions and schemas " \
           f"(max_total_schema_bytes = {room})" in notice.message


def test_a_joined_name_two_servers_share_is_offered_twice() -> None:
    made = offer([("a", tools("a", "b__c")), ("a__b", tools("a__b", "c"))],
                 max_tools=10, max_bytes=10**6)
    renamed = f"mcp__a__b__c_{zlib.crc32(b'c'):08x}"
    assert list(made.tools) == ["mcp__a__b__c", renamed]
    assert made.tools[renamed].name == renamed and made.tools[renamed].remote_name == "c"
    assert made.tools["mcp__a__b__c"].remote_name == "b__c"
    [notice] = made.notices
    assert notice.kind == "warning" and notice.server == "a__b" and renamed in notice.message


def test_nothing_to_say_when_everything_fits() -> None:
    made = offer([("a", tools("a", "x")), ("b", tools("b", "x"))], max_tools=2,
                 max_bytes=10**6)
    assert list(made.tools) == ["mcp__a__x", "mcp__b__x"] and made.notices == ()
