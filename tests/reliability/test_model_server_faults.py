"""A misbehaving model server behind a real runtime: each fault ends the turn with a clean
error, the runtime and the session go on, and the next prompt in the same session works.

The server is real HTTP on 127.0.0.1 (the provider suite's :class:`FakeOpenAIServer`,
speaking the chat-completions SSE wire), and, for faults below HTTP, a raw socket that
never answers, answers with bytes that are not HTTP, or hangs up at once. The runtime is
``dsh --profile sdk`` with one ``llm-openai-compatible`` row pointed at it, driven by the
SDK client.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from faultkit import Figure, stored_events

from dsh.sdk import ClientConfig, DshClient, RunResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))
from fake_openai_server import FakeOpenAIServer, Reply, chunk, event, text_stream

pytestmark = pytest.mark.reliability

ROUTE = """\
- insert:
    - id: llm-fault
      name: llm-openai-compatible
      config:
        route: fault
        base_url: %(url)s
        api_key_env: null
        default_model: m
        timeout_s: 1.0
        connect_timeout_s: 2.0
        max_retries: 1
        backoff_base_s: 0.01
        backoff_max_s: 0.02
- {id: agent, merge: {config: {default_route: fault}}}
"""


class RawServer:
    """A TCP server on 127.0.0.1 that reads a request, then does ``what`` with it:
    ``stall`` (sends nothing, until the client hangs up), ``garbage`` (non-HTTP bytes,
    then close) or ``hangup`` (close at once)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.accepted = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            with conn:
                conn.settimeout(0.05)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                if self.what == "garbage":
                    with contextlib.suppress(OSError):
                        conn.sendall(b"\x00\xffSMTP ready?\r\n\r\n\x13\x37garbage\r\n")
                elif self.what == "stall":
                    while not self._stop.is_set():  # until the client gives up
                        try:
                            if not conn.recv(1):
                                break
                        except TimeoutError:
                            continue
                        except OSError:
                            break


def _config(home: Path, tmp: Path, url: str) -> ClientConfig:
    patch = tmp / "route.yml"
    patch.write_text(ROUTE % {"url": json.dumps(url)})
    return ClientConfig(profile="sdk", dsh_home=home, patches=[patch],
                        initialize_timeout=60.0, shutdown_timeout=5.0)


def _failed_turn(result: RunResult, code: str) -> None:
    """The run ended with one ``turn/end`` whose reason is an error carrying ``code`` and
    a message, after a closed step."""
    assert result.stop_reason == "error", result
    types = [e.type for e in result.events]
    assert types.count("turn/end") == 1 and types[-2:] == ["step/end", "turn/end"], types
    reason = result.events[-1].data["reason"]
    assert reason["error"]["code"] == code, reason
    assert reason["error"]["message"].strip(), reason


def _good_turn_after(client: DshClient, session: Any, home: Path,
                     server: FakeOpenAIServer) -> None:
    """The same session, same runtime: the next prompt completes with the server's text."""
    server.script(Reply(pieces=text_stream("back ", "to normal")))
    result = session.run("again")
    assert result.stop_reason == "completed", result
    assert result.final_text == "back to normal"
    sent = server.requests[-1].body["messages"]
    assert sent[-1]["role"] == "user"  # a well-formed history went out
    status = client.request("runtime/status")
    assert status["state"] == "ready"
    verdict, stored = stored_events(home, session.id)
    assert verdict == "ok" and [e["seq"] for e in stored] == list(range(len(stored)))


HTTP_FAULTS: dict[str, tuple[list[Reply], str]] = {
    # headers, two deltas, then nothing: the read timeout cuts a stream already begun; the
    # agent voids what it showed (assistant/retry) and asks once more, which stalls too
    "stall-mid-stream": ([Reply(pieces=[chunk({"content": "par"}), chunk({"content": "t"})],
                                hold=True)] * 2, "stream-interrupted"),
    # the connection drops mid-answer, twice: asked once more, then reported
    "drop-mid-stream": ([Reply(pieces=[chunk({"content": "half an ans"})], cut=True)] * 2,
                        "stream-interrupted"),
    # drops before any delta, twice: retried once, then reported
    "drop-before-answer": ([Reply(cut=True), Reply(cut=True)], "connection"),
    # well-framed SSE whose data is not JSON
    "garbage-event": ([Reply(pieces=[event("{this is not json")])], "bad-response"),
    # an HTML error page with a 200 and no stream
    "garbage-body": ([Reply(pieces=[b"<html>oops</html>"],
                            headers={"Content-Type": "text/html"})] * 2, "connection"),
}


@pytest.mark.parametrize("fault", list(HTTP_FAULTS))
def test_http_fault_ends_the_turn_and_the_session_goes_on(fault: str, dsh_home: Path,
                                                          tmp_path: Path,
                                                          figure: Figure) -> None:
    replies, code = HTTP_FAULTS[fault]
    with FakeOpenAIServer() as server, DshClient(_config(dsh_home, tmp_path,
                                                         server.base_url)) as client:
        server.script(*replies)
        session = client.new_session()
        failed = session.run("hello")
        _failed_turn(failed, code)
        retries = [e for e in failed.events if e.type == "assistant/retry"]
        assert len(retries) == (1 if code == "stream-interrupted" else 0)
        assert not [e for e in failed.events if e.type == "assistant/message"]
        _good_turn_after(client, session, dsh_home, server)
    assert client.exit_code == 0
    figure("turn error code", code)
    figure("next turn", "completed")
    figure("runtime exit", client.exit_code)


@pytest.mark.parametrize(("what", "code"), [("stall", "timeout"), ("garbage", "connection"),
                                            ("hangup", "connection")])
def test_socket_fault_ends_the_turn_and_the_runtime_goes_on(what: str, code: str,
                                                            dsh_home: Path, tmp_path: Path,
                                                            figure: Figure) -> None:
    with RawServer(what) as raw, DshClient(_config(dsh_home, tmp_path,
                                                   raw.base_url)) as client:
        session = client.new_session()
        _failed_turn(session.run("hello"), code)
        assert raw.accepted == 2  # the first attempt and its one retry
        # The same runtime still serves: a second failing turn fails the same clean way.
        _failed_turn(session.run("hello again"), code)
        assert client.request("runtime/status")["state"] == "ready"
    assert client.exit_code == 0
    verdict, stored = stored_events(dsh_home, session.id)
    assert verdict == "ok"
    assert [e["data"]["reason"]["kind"] for e in stored if e["type"] == "turn/end"] == [
        "error", "error"]
    figure("turn error code", code)
    figure("clean failed turns", 2)
    figure("runtime exit", client.exit_code)
