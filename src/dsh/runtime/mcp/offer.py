"""What a session's MCP servers offer the model together: one name per tool, in budget.

Each server's tools are already within its own budget (:mod:`.connection`); this puts the
ready servers of one session side by side, in the order they were given, and applies the
session's (``max_total_tools``, ``max_total_schema_bytes``): a tool that does not fit is
left out, and each server that lost tools to it gets one ``error`` notice naming the
setting. Two servers' tools whose joined names are the same (``mcp__a__b__c`` is tool
``b__c`` of server ``a`` and tool ``c`` of server ``a__b``) are both offered: the later
server's under a checksummed name, with a ``warning`` notice saying which is which.

Pure: computed when a server's tools change, never per model request, whose tool list
is then a ready mapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from dsh.runtime.mcp.config import tool_name
from dsh.runtime.mcp.tools import McpTool


class Notice(NamedTuple):
    """A problem to say on the session: ``kind`` is the event type."""

    kind: str
    server: str
    message: str
    setting: str | None = None


class Offer(NamedTuple):
    """The tools offered under their names, and what to say about them."""

    tools: Mapping[str, McpTool]
    notices: tuple[Notice, ...]


def offer(servers: Iterable[tuple[str, Mapping[str, McpTool]]], *, max_tools: int,
          max_bytes: int) -> Offer:
    """The session's offer from ``(server, its tools)`` pairs, in order."""
    tools: dict[str, McpTool] = {}
    notices: list[Notice] = []
    used = 0
    for server, mine in servers:
        left, hit = 0, []
        for name, tool in mine.items():
            if len(tools) >= max_tools or used + tool.schema_bytes > max_bytes:
                left += 1
                setting = "max_total_tools" if len(tools) >= max_tools else \
                    "max_total_schema_bytes"
                if setting not in hit:
                    hit.append(setting)
                continue
            if name in tools:
                other = tools[name]
                unique = tool_name(server, tool.remote_name, tools)
                notices.append(Notice("warning", server, (
                    f"MCP tool names collide: tool '{tool.remote_name}' of server '{server}' "
                    f"and tool '{other.remote_name}' of server '{other.server}' are both "
                    f"'{name}'; both are offered, the one of server '{server}' as "
                    f"'{unique}'")))
                tool, name = tool.renamed(unique), unique
            tools[name] = tool
            used += tool.schema_bytes
        if left:
            limits = {"max_total_tools": f"at most {max_tools} tools",
                      "max_total_schema_bytes": f"at most {max_bytes} bytes of names, "
                                                "descriptions and schemas"}
            why = " and ".join(f"{limits[s]} ({s} = "
                               f"{max_tools if s == 'max_total_tools' else max_bytes})"
                               for s in hit)
            notices.append(Notice("error", server, (
                f"MCP server '{server}': {left} of its {len(mine)} tools left out: the "
                f"session's servers together may offer {why}; "
                f"{len(mine) - left} offered"), hit[0]))
    return Offer(tools, tuple(notices))
