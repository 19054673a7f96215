"""An attacker's shell commands against the sandbox, on the Landlock rung reached each way a
machine reaches it (``bwrap`` failing as in Docker, no ``bwrap`` at all, the runtime under a
seccomp filter refusing namespaces), and on bubblewrap for comparison.

A real ``dsh --profile sdk`` (the shipped ``workspace-write`` sandbox, no network) is
driven by a scripted model that tries, one ``bash`` call each, what someone trying to get
out would: read the dsh home's ``.env`` and the user's key (directly, through a symlink it
plants, through ``/proc/self/root``, through a link somebody left in ``/tmp``, through the
runtime's own ``/proc/PID``), write outside the workspace (directly and through a
symlink), hard-link the ``.env`` into the workspace, connect to a listener on another
port of 127.0.0.1, send a UDP datagram (DNS) to a listener, open a raw socket, make a
user namespace, signal the runtime (its pid handed over in a file), write the host's
``/dev/shm``. The verdict is the host's: no canary in any result, nothing written
outside, nothing accepted or received.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from boundarykit import Attack
from sandboxrungs import WAYS, arrange, skip_reason

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the ladder's rungs are Linux's")

CANARY = f"canary-{os.urandom(6).hex()}"
UDP, NAMESPACE, SHM = 11, 13, 15
"""Attempts bubblewrap lets through harmlessly: a datagram into its own empty network, a
user namespace nested in its own, a file in its own ``/dev/shm`` (the Landlock rung
refuses all three; the host's side is checked either way)."""


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host folder outside the workspace, outside /tmp."""
    with tempfile.TemporaryDirectory(prefix="dsh-attack-", dir="/var/tmp") as path:
        yield Path(path)


@pytest.fixture
def listeners() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A TCP listener and a UDP socket on 127.0.0.1, nothing received yet."""
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(4)
        tcp.settimeout(0)
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(0)
        yield tcp, udp


def bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": f"{{ {command}; }} 2>&1; echo rc=$?"}}


@pytest.mark.parametrize("way", WAYS)
def test_an_attackers_commands_get_nothing_out(
        tmp_path: Path, outside: Path, listeners: tuple[socket.socket, socket.socket],
        way: str) -> None:
    if why := skip_reason(way):
        pytest.skip(why)
    tcp, udp = listeners
    home = tmp_path / "dsh-home"
    home.mkdir(mode=0o700)
    (home / ".env").write_text(f"SERVICE_TOKEN={CANARY}-env\n")
    (home / "patch.yml").write_text("[]\n")
    user = tmp_path / "userhome"
    (user / ".ssh").mkdir(parents=True)
    (user / ".ssh" / "id_ed25519").write_text(f"{CANARY}-key\n")
    work = tmp_path / "work"
    work.mkdir()
    left_in_tmp = Path(tempfile.mkdtemp(prefix="dsh-attack-link-")) / "home"
    left_in_tmp.symlink_to(home)
    python = sys.executable
    calls = [
        bash(f"cat {home}/.env"),
        bash(f"cat {user}/.ssh/id_ed25519"),
        bash(f"ln -s {home} planted && cat planted/.env"),
        bash(f"cat /proc/self/root{home}/.env"),
        bash(f"cat {left_in_tmp}/.env"),
        bash("cat /proc/$PPID/environ /proc/1/environ | tr '\\0' '\\n' | grep -c TOKEN"),
        bash(f"echo x > {outside}/direct"),
        bash(f"ln -s {outside} out && echo x > out/through-link"),
        bash(f"ln {home}/.env hard && cat hard"),
        bash(f"echo x > {home}/patch.yml"),
        bash(f"exec 3<>/dev/tcp/127.0.0.1/{tcp.getsockname()[1]} && echo connected"),
        bash(f"exec 3<>/dev/udp/127.0.0.1/{udp.getsockname()[1]} && echo dns-query >&3 "
             "&& echo sent"),
        bash(f"{python} -I -S -c 'import socket; socket.socket(socket.AF_INET, "
             "socket.SOCK_RAW, socket.IPPROTO_ICMP); print(\"raw socket\")'"),
        bash("unshare -U true && echo namespace"),
        bash("kill -0 $(cat runtime.pid) && echo signalled"),
        bash("echo x > /dev/shm/dsh-attack && echo shm-written"),
        bash("echo fine > inside.txt && cat inside.txt"),
    ]
    arranged = arrange(way, tmp_path)
    env = {"DSH_HOME": str(home), "HOME": str(user), **arranged.env}
    try:
        with Attack(tmp_path, calls, cwd=work, env=env, wrapper=arranged.wrapper) as attack:
            (work / "runtime.pid").write_text(f"{attack.proc.proc.pid}\n")
            turn = attack.turn(timeout=120)
            attack.close()
    finally:
        left_in_tmp.unlink()
        left_in_tmp.parent.rmdir()
    texts = turn.texts()
    assert len(texts) == len(calls), texts
    assert CANARY not in json.dumps(turn.results), texts
    for index, (call, text) in enumerate(zip(calls[:-1], texts, strict=False)):
        if way == "bubblewrap" and index in (UDP, NAMESPACE, SHM):
            continue
        last = [line for line in text.splitlines() if line.startswith("rc=")][-1]
        assert last != "rc=0", (call["arguments"]["command"], text)  # each attempt failed...
    for word in ("connected", "raw socket", "signalled"):
        assert not any(word in text for text in texts), (word, texts)
    assert texts[-1].startswith("fine\nrc=0"), texts[-1]  # ...and honest work did not
    assert calls[UDP]["arguments"]["command"].startswith("{ exec 3<>/dev/udp/")
    assert calls[NAMESPACE]["arguments"]["command"].startswith("{ unshare -U")
    assert "/dev/shm" in calls[SHM]["arguments"]["command"]
    if way != "bubblewrap":
        assert "sent" not in texts[UDP] and "namespace" not in texts[NAMESPACE], texts
        assert "shm-written" not in texts[SHM], texts[SHM]
    assert "0\nrc=1" in texts[5], texts[5]  # no TOKEN in any environ it could read
    assert sorted(os.listdir(outside)) == [], os.listdir(outside)
    assert (home / "patch.yml").read_text() == "[]\n"
    assert not (work / "hard").exists()
    assert not os.path.exists("/dev/shm/dsh-attack")
    with pytest.raises(BlockingIOError):
        tcp.accept()
    with pytest.raises(BlockingIOError):
        udp.recv(100)
    if way != "bubblewrap":  # Landlock's refusals are EACCES, said as such
        assert "Permission denied" in texts[0] and "Permission denied" in texts[6], texts
    print(f"\n--- {way}:\n" + "\n".join(f"{c['arguments']['command']}\n  -> {t!r}"
                                         for c, t in zip(calls, texts, strict=True)))
