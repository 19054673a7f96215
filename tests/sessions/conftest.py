"""The sessions suite drives real runtimes with the protocol and web suites' process helpers, and
``sessions-postgres`` against a real PostgreSQL (``tests/fixtures/pgcluster.py``)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

for _suite in ("protocol", "web"):
    _path = str(Path(__file__).resolve().parents[1] / _suite)
    if _path not in sys.path:
        sys.path.insert(0, _path)


# -- PostgreSQL: one throwaway cluster for the session, a fresh schema for each test ------

import pgcluster  # noqa: E402  (tests/fixtures, on the path from tests/conftest.py)

_SCHEMAS = itertools.count(1)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pgcluster.Cluster]:
    """A real PostgreSQL server for the whole run (skipped without its binaries)."""
    pytest.importorskip("psycopg", reason="sessions-postgres tests need psycopg")
    bindir = pgcluster.find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl are not installed (Debian: postgresql; "
                    "scripts/dev-setup.sh installs it)")
    cluster = pgcluster.Cluster(bindir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_schema(pg_cluster: pgcluster.Cluster) -> str:
    """A schema name no other test uses (dsh creates it on first use)."""
    return f"t{next(_SCHEMAS)}"
