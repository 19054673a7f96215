"""``dsh doctor --live`` asks the sessions row itself (``diagnose``) about its database:
reachable, schema version, lease table; a bad DSN fails the check, never showing the
password."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pgcluster
import pytest
from runtimeproc import REPO

pytest.importorskip("psycopg")

POSTGRES_PATCH = REPO / "examples" / "postgres" / "patch.yml"


def checks(run_dsh: Any, patch: Path, dsn: str) -> tuple[int, dict[str, dict[str, str]], str]:
    done = run_dsh("doctor", "--live", "--json", "--profile", "headless", "--patch",
                   str(POSTGRES_PATCH), "--patch", str(patch),
                   env={"DSH_POSTGRES_DSN": dsn}, timeout=120)
    document = json.loads(done.stdout)
    found = {c["id"]: c for c in document["data"]["checks"] if c["id"].startswith(
        "plugin.sessions.")}
    return done.returncode, found, done.stdout + done.stderr


def test_doctor_live_checks_the_database(run_dsh: Any, tmp_path: Path,
                                         pg_cluster: pgcluster.Cluster, pg_schema: str) -> None:
    patch = tmp_path / "schema.yml"
    patch.write_text(json.dumps([{"id": "sessions", "merge": {"config": {
        "schema": pg_schema}}}]))
    _, found, text = checks(run_dsh, patch, pg_cluster.dsn())
    assert found["plugin.sessions.reachable"]["status"] == "ok"
    assert found["plugin.sessions.reachable"]["message"].startswith(
        f"postgresql://127.0.0.1:{pg_cluster.port}/dsh as dsh answers (PostgreSQL ")
    assert found["plugin.sessions.schema"] == {
        "id": "plugin.sessions.schema", "status": "warn",
        "message": f"schema '{pg_schema}' not created yet (the first runtime creates it)"}
    # (the exit status also reflects the model route's checks, which need a key: not ours)
    assert pgcluster.PASSWORD not in text
    done = run_dsh("sessions", "export", "--profile", "headless", "--patch",
                   str(POSTGRES_PATCH), "--patch", str(patch),
                   env={"DSH_POSTGRES_DSN": pg_cluster.dsn()})  # opening creates it
    assert done.returncode == 0, done.stderr
    _, found, text = checks(run_dsh, patch, pg_cluster.dsn())
    assert found["plugin.sessions.schema"]["status"] == "ok"
    assert "at version 2 (this dsh: 2, current)" in found["plugin.sessions.schema"]["message"]
    assert found["plugin.sessions.leases"] == {
        "id": "plugin.sessions.leases", "status": "ok",
        "message": "lease table readable: 0 held, 0 expired (taken over at next use)"}
    assert pgcluster.PASSWORD not in text
    wrong = pg_cluster.dsn(password="not-" + pgcluster.PASSWORD)
    code, found, text = checks(run_dsh, patch, wrong)
    assert code == 1
    assert found["plugin.sessions.reachable"]["status"] == "fail"
    assert "password authentication failed" in found["plugin.sessions.reachable"]["message"]
    assert pgcluster.PASSWORD not in text
