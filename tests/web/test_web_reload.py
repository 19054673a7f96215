"""Live reload in ``dsh web`` (patch-reload ``live``): editing the profile's ``patch.yml``
while it runs changes the effective config the API reports, and open event streams hear
a ``config`` event (the page refreshes its config view on it)."""

from __future__ import annotations

import time
from pathlib import Path

from webkit import OFFLINE_PATCH, WebProcess, sse_events

DEADLINE_S = 30.0


def test_editing_the_profile_patch_changes_the_config_api(dsh_home: Path) -> None:
    with WebProcess([OFFLINE_PATCH], cwd=Path.cwd()) as web, web.client() as client:
        def policy() -> dict:
            rows = client.get("/api/config").json()["config"]["rows"]
            return next(r for r in rows if r["id"] == "policy")

        assert policy()["config"]["mode"] == "workspace"
        session = client.post("/api/sessions").json()["sessionId"]
        patch = dsh_home / "profiles" / "web" / "patch.yml"
        heard = None
        started = time.monotonic()
        with client.stream("GET", f"/api/sessions/{session}/events") as response:
            reader = sse_events(response)
            assert next(reader)[0] == "session.status"
            patch.write_text("- {id: policy, merge: {config: {mode: deny-mutating}}}\n")
            for name, data, _ in reader:
                if name == "config":
                    heard = data
                    break
                assert time.monotonic() - started < DEADLINE_S, "no config event"
        assert heard is not None and heard["event"] == "config.reloaded", heard
        assert "policy" in heard["diff"]["updated"]
        row = policy()
        assert row["config"]["mode"] == "deny-mutating"
        assert row["provenance"]["config.mode"].startswith(str(patch))
        assert web.stop() == 0
