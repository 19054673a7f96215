"""Many event streams of a session with a big history, against a real ``dsh web``.

Issue 34: 300 streams on such a session made ``GET /api/status`` take 29 s (each stream
encoded the whole history for itself, without letting the loop serve anything else until
its socket filled) and memory reach 1.1 GB. Now the streams share encoded pages of one
history read and take turns per page. Here 300 raw sockets read their streams while the
test asks for ``/api/status`` again and again: each answer must come (the bound only
turns the old minutes into a failure: how fast is ``web_status_under_streams`` in
``scripts/bench.py``), and every stream must get the same, whole history in order.
"""

from __future__ import annotations

import hashlib
import json
import re
import selectors
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from webkit import WebProcess, write_patch

STREAMS = 300
EVENTS = 20_000  # assistant/delta events of one long answer, one character each
STATUS_BOUND = 30.0  # s: far beyond a fair answer, far below the old replay
END = re.compile(rb'event: session\.status\ndata: \{[^\n]*\}\n\n')


class Reader:
    """Reads ``STREAMS`` raw HTTP/1.0 event streams in one thread: each body's sha256 up
    to and including its first ``session.status`` frame (what follows the history)."""

    def __init__(self, port: int, token: str, session_id: str) -> None:
        self.selector = selectors.DefaultSelector()
        self.digests: dict[int, str] = {}
        self.failure: BaseException | None = None
        request = (f"GET /api/sessions/{session_id}/events?token={token} HTTP/1.0\r\n"
                   f"Host: 127.0.0.1:{port}\r\n\r\n").encode()
        self.state: dict[int, list] = {}
        self.socks: list[socket.socket] = []
        for index in range(STREAMS):
            sock = socket.create_connection(("127.0.0.1", port))
            self.socks.append(sock)
            sock.sendall(request)
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, index)
            self.state[index] = [None, hashlib.sha256(), b""]  # head, digest, tail
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while len(self.digests) < STREAMS:
                for key, _ in self.selector.select(5):
                    data = key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
                    assert data, f"stream {key.data} closed before its status frame"
                    self._take(key.data, data)
        except BaseException as exc:  # surfaced by the test
            self.failure = exc

    def _take(self, index: int, data: bytes) -> None:
        head, digest, tail = self.state[index]
        if head is None:
            data = tail + data
            if b"\r\n\r\n" not in data:
                self.state[index][2] = data
                return
            head, data = data.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
            self.state[index][0], tail = head, b""
        window = tail + data
        found = END.search(window)
        if found is not None:
            digest.update(data[:found.end() - len(tail)])
            self.digests[index] = digest.hexdigest()
            self.selector.unregister(self.socks[index])
            return
        digest.update(data)
        self.state[index][2] = window[-4096:]

    def done(self) -> bool:
        return not self.thread.is_alive()

    def close(self) -> None:
        self.thread.join(STATUS_BOUND)
        self.selector.close()
        for sock in self.socks:
            sock.close()


def test_300_streams_of_a_big_history_share_it_and_status_still_answers(
        tmp_path: Path) -> None:
    script = json.dumps([{"text": "x" * (EVENTS - 1)}])
    patch = write_patch(tmp_path, script,
                        extra="- {id: llm-scripted, merge: {config: {chunk_size: 1}}}\n")
    with WebProcess([patch], cwd=Path.cwd()) as web, web.client() as client:
        session = client.post("/api/sessions").json()["sessionId"]
        client.post(f"/api/sessions/{session}/prompt",
                    json={"contentBlocks": [{"type": "text", "text": "go"}]})
        while client.get("/api/sessions").json()["sessions"][0]["status"] != "idle":
            time.sleep(0.2)
        size = 0
        cursor = None
        while True:
            page = client.get(f"/api/sessions/{session}/history",
                              params={"cursor": cursor or "", "limit": 10_000}).json()
            size += len(page["events"])
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert size > EVENTS
        rss_before = rss_kib(web.proc.pid)

        reader = Reader(web.port, web.token, session)
        answers = 0
        try:
            with httpx.Client(base_url=web.base, timeout=STATUS_BOUND, headers={
                    "Authorization": f"Bearer {web.token}"}) as status_client:
                while not reader.done():
                    assert status_client.get("/api/status").status_code == 200
                    answers += 1
                    time.sleep(0.05)
            peak = rss_kib(web.proc.pid)
        finally:
            reader.close()
        assert reader.failure is None, reader.failure
        assert answers >= 1

        # One more stream, read as a client reads it: the whole history, in order.
        with client.stream("GET", f"/api/sessions/{session}/events") as response:
            digest, seqs, body = hashlib.sha256(), [], b""
            for chunk in response.iter_raw():
                body += chunk
                found = END.search(body)
                if found is not None:
                    body = body[:found.end()]
                    break
        digest.update(body)
        seqs = [int(n) for n in re.findall(rb"^id: (\d+)$", body, re.MULTILINE)]
    assert seqs == list(range(size))
    assert set(reader.digests.values()) == {digest.hexdigest()}
    if rss_before is not None and peak is not None:
        # A page of buffer per stream and the shared pages, not a history per stream.
        assert peak - rss_before < 128 * 1024, (rss_before, peak)


def rss_kib(pid: int) -> int | None:
    """The resident size of ``pid`` in KiB (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


@pytest.fixture(autouse=True)
def _enough_files() -> None:
    """300 streams need 300 sockets on each side."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * STREAMS + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
