"""The live profile's ``patch.yml`` replaced over and over while the runtime reloads it.

A writer thread alternates atomic replacements (write a temp file, ``os.replace``) with
truncating writes made in two pieces with a pause between them, so the runtime can read
an empty or torn file mid-write. Meanwhile the test keeps asking ``config/get``. Checked:
every request is answered (the runtime never crashes or stalls), every tree it serves is
one the files really described (never a half-applied one), a torn file fails as a reload
error and keeps the last good tree, and after the last write the final content is
applied: the served tree equals the one ``dsh --dump-config`` composes from the files.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import OFFLINE_PATCH, SETTLE, Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from runtimeproc import RuntimeProcess

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="the live watcher is exercised on Linux")]

ROUNDS = 40
BOOT_STEPS = 50  # dsh-base's max_steps: what an empty patch file gives
FINAL_STEPS = 4242
PAD = "# " + "padding so a torn read is likely " * 8 + "\n"


def _text(steps: int) -> str:
    return f"{PAD}- {{id: agent, merge: {{config: {{max_steps: {steps}}}}}}}\n{PAD}"


def _writer(path: Path, seed: int, stop: threading.Event) -> list[int]:
    """Replace ``path`` ROUNDS times; return the values written, in order."""
    rng = random.Random(seed)
    written = []
    for n in range(ROUNDS):
        if stop.is_set():
            break
        steps = 100 + n
        data = _text(steps)
        if n % 2:
            temp = path.with_name(f".patch.yml.{n}")
            temp.write_text(data)
            os.replace(temp, path)
        else:
            with open(path, "w") as f:  # truncates first: an empty file is visible
                f.write(data[:len(data) // 2])
                f.flush()
                time.sleep(rng.uniform(0.0, 0.03))
                f.write(data[len(data) // 2:])
        written.append(steps)
        time.sleep(rng.uniform(0.0, 0.05))
    return written


def _max_steps(config: dict[str, Any]) -> int:
    agent = next(r for r in config["rows"] if r["id"] == "agent")
    return int(agent["config"]["max_steps"])


def _config(proc: RuntimeProcess, notes: list[dict[str, Any]]) -> dict[str, Any]:
    """``config/get``'s tree, keeping the notifications that arrive before the answer."""
    rid = proc.request("config/get")
    while True:
        frame = proc.recv(timeout=SETTLE)
        if "method" in frame:
            notes.append(frame)
        elif frame.get("id") == rid:
            assert "result" in frame, frame
            return frame["result"]["config"]


def _strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without provenance (a dump carries it, the runtime may not)."""
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k != "provenance"}
        if row.get("group"):
            row["config"] = _strip(row["config"])
        out.append(row)
    return out


def test_patch_replaced_mid_read(dsh_home: Path, tmp_path: Path,
                                 run_dsh: Callable[..., Any], figure: Figure) -> None:
    made = run_dsh("--profile", "p", "--from-default-profile", "sdk", "--dump-config")
    assert made.returncode == 0, made.stderr
    toml = dsh_home / "profiles" / "p" / "profile.toml"
    toml.write_text(toml.read_text().replace('patch-reload = "startup"',
                                             'patch-reload = "live"'))
    patch = dsh_home / "profiles" / "p" / "patch.yml"

    proc = RuntimeProcess("p", [OFFLINE_PATCH], cwd=tmp_path)
    try:
        proc.initialize(tmp_path)
        notes: list[dict[str, Any]] = []
        assert _max_steps(_config(proc, notes)) == BOOT_STEPS

        stop = threading.Event()
        written: list[int] = []
        thread = threading.Thread(target=lambda: written.extend(_writer(patch, 9, stop)))
        thread.start()
        seen = []
        try:
            while thread.is_alive():
                seen.append(_max_steps(_config(proc, notes)))
                time.sleep(0.005)
        finally:
            stop.set()
            thread.join()
        assert written == [100 + n for n in range(ROUNDS)]

        patch.with_name(".patch.yml.final").write_text(_text(FINAL_STEPS))
        os.replace(patch.with_name(".patch.yml.final"), patch)
        deadline = time.monotonic() + SETTLE
        while (steps := _max_steps(_config(proc, notes))) != FINAL_STEPS:
            seen.append(steps)
            assert time.monotonic() < deadline, f"final patch never applied: {steps}"
            time.sleep(0.05)

        # Only trees the files really described were ever served.
        assert set(seen) <= {BOOT_STEPS, *written}, sorted(set(seen))
        reloads = [n["method"] for n in notes if n["method"].startswith("config.")]
        assert "config.reloaded" in reloads, reloads
        failures = [n["params"] for n in notes if n["method"] == "config.reload_failed"]
        for failure in failures:  # a torn file is a YAML error naming the file
            assert failure["file"] == str(patch), failure
        status = proc.call("runtime/status")["result"]
        assert status["state"] == "ready" and status["reloadRequired"] is False, status
        served = _config(proc, notes)
        proc.close_stdin()
        assert proc.wait() == 0, proc.stderr()
    finally:
        proc.finish()

    dumped = run_dsh("--profile", "p", "--patch", str(OFFLINE_PATCH), "--dump-config", "--json")
    assert dumped.returncode == 0, dumped.stderr
    assert _strip(served["rows"]) == _strip(json.loads(dumped.stdout)["rows"])
    figure("patch writes", len(written) + 1)
    figure("reloads applied", reloads.count("config.reloaded"))
    figure("torn reads refused", len(failures))
    figure("crashes", 0)
    figure("final content applied", True)
