"""One JSON-RPC peer: no module of dsh but ``dsh.core.peer`` matches requests to answers
or puts a timeout on a request.

Issue 29's pin. Three peers (the SDK client, the servers, the MCP client) each wrote their
own request-with-timeout and had drifted apart: a bare ``TimeoutError`` here, a cancel
notification only there. The source is parsed (not imported) and every way back to a
second copy is looked for:

* the request table, :class:`~dsh.core.jsonrpc.PendingRequests`, named anywhere;
* :func:`~dsh.core.jsonrpc.parse_message` (what turns a frame into the ``Response`` a
  table resolves), or the builder of a request (:func:`dsh.core.jsonrpc.request`, which
  takes the id only a request table hands out);
* ``asyncio.wait_for`` or ``asyncio.timeout`` around a ``.request(...)`` call: a
  request's timeout is ``request(timeout=...)``, where it is typed and the other side is
  told.

Only ``dsh/core/jsonrpc.py`` (which defines them) and ``dsh/core/peer.py`` may.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src"
ALLOWED = {SOURCE / "dsh" / "core" / "jsonrpc.py", SOURCE / "dsh" / "core" / "peer.py"}

_MATCHING = {"PendingRequests", "parse_message"}
_TIMEOUTS = {"wait_for", "timeout", "timeout_at"}


def _calls_request(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "request" for n in ast.walk(node))


def _jsonrpc_request_builder(node: ast.Call, builders: set[str]) -> bool:
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "request":
        return isinstance(func.value, ast.Name) and func.value.id == "jsonrpc"
    return isinstance(func, ast.Name) and func.id in builders


def violations(source: str, filename: str = "<source>") -> list[str]:
    """Every place in ``source`` that matches requests or times one out, as ``line: what``."""
    tree = ast.parse(source, filename)
    # Names bound to dsh.core.jsonrpc.request by ``from dsh.core.jsonrpc import request``.
    builders = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "dsh.core.jsonrpc"
                for alias in node.names if alias.name == "request"}
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Name) and node.id in _MATCHING:
            what = node.id
        elif isinstance(node, ast.Attribute) and node.attr in _MATCHING:
            what = node.attr
        elif isinstance(node, ast.ImportFrom) and node.module == "dsh.core.jsonrpc":
            names = [a.name for a in node.names if a.name in _MATCHING | {"request"}]
            what = f"from dsh.core.jsonrpc import {', '.join(names)}" if names else None
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if _jsonrpc_request_builder(node, builders):
                what = "builds a JSON-RPC request (its id belongs to the peer)"
            elif name == "wait_for" and node.args and _calls_request(node.args[0]):
                what = "wait_for around a request (use request(timeout=...))"
        elif isinstance(node, ast.AsyncWith):
            for item in node.items:
                call = item.context_expr
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr in _TIMEOUTS
                        and any(_calls_request(stmt) for stmt in node.body)):
                    what = f"asyncio.{call.func.attr} around a request (use request(timeout=...))"
        if what is not None:
            found.append(f"{filename}:{node.lineno}: {what}")
    return found


def test_no_module_but_the_peer_matches_or_times_out_requests() -> None:
    found = [v for path in sorted(SOURCE.rglob("*.py")) if path not in ALLOWED
             for v in violations(path.read_text(encoding="utf-8"),
                                 str(path.relative_to(ROOT)))]
    assert not found, ("only src/dsh/core/peer.py may match JSON-RPC requests to answers "
                       "or time them out:\n" + "\n".join(found))


def test_the_peer_is_what_every_speaker_uses() -> None:
    """The SDK client, the servers and the MCP client each build a Peer (they import it),
    and the core peer imports nothing above the core."""
    speakers = ("sdk/_router.py", "runtime/servers/jsonrpc_server.py",
                "runtime/mcp/session.py")
    for name in speakers:
        text = (SOURCE / "dsh" / name).read_text(encoding="utf-8")
        assert "from dsh.core.peer import" in text and "Peer(" in text, name
    tree = ast.parse((SOURCE / "dsh" / "core" / "peer.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dsh"):
            assert node.module == "dsh.core" or node.module.startswith("dsh.core."), node.module


@pytest.mark.parametrize("code", [
    "from dsh.core.jsonrpc import PendingRequests",
    "from dsh.core import jsonrpc\ntable = jsonrpc.PendingRequests()",
    "from dsh.core import jsonrpc\nmessage = jsonrpc.parse_message(raw)",
    "from dsh.core.jsonrpc import parse_message",
    "from dsh.core import jsonrpc\nframe = jsonrpc.request(7, 'tools/list')",
    "from dsh.core.jsonrpc import request as build\nframe = build(7, 'tools/list')",
    "import asyncio\nasync def f(peer):\n    return await asyncio.wait_for(peer.request('x'), 5)",
    "import asyncio\nasync def f(c):\n    return await asyncio.wait_for(c.peer.request('x'), 5)",
    "import asyncio\nasync def f(peer):\n    async with asyncio.timeout(5):\n"
    "        return await peer.request('x')",
])
def test_the_scan_finds_every_second_copy(code: str) -> None:
    """The scan itself fails on each form (so the pin above can fail)."""
    assert violations(code), code


def test_the_scan_leaves_other_timeouts_and_the_peer_api_alone() -> None:
    assert not violations(
        "import asyncio\n"
        "from dsh.core.jsonrpc import Notification, Params, encode\n"
        "async def f(peer, proc):\n"
        "    await asyncio.wait_for(proc.wait(), 5)\n"
        "    async with asyncio.timeout(1):\n"
        "        await proc.exited()\n"
        "    return await peer.request('tools/list', timeout=5)\n")
