"""The reliability suite: fault injection with real processes (``pytest -m reliability``).

Every test here must carry the ``reliability`` marker (an autouse guard fails one that
does not, so ``-m reliability`` in CI never silently skips a fault). Each test records
the figures it checks with the ``figure`` fixture (``events lost: 0``, ``crashes: 0``);
they are printed in the terminal summary and stored as the test's ``user_properties``
(so ``--junitxml`` carries them too).
"""

from __future__ import annotations

import pytest
from faultkit import Figure


@pytest.fixture(autouse=True)
def _marked_reliability(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("reliability") is None:
        pytest.fail(f"{request.node.nodeid}: tests in tests/reliability need "
                    "@pytest.mark.reliability", pytrace=False)


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Figure:
    """``figure(name, value)``: record a checked figure of this test."""

    def record(name: str, value: object) -> None:
        request.node.user_properties.append((name, value))

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per passed test that recorded figures: ``test id: name=value, ...``."""
    lines = []
    for report in terminalreporter.stats.get("passed", []):
        figures = [(k, v) for k, v in report.user_properties]
        if report.when == "call" and figures and "reliability" in report.keywords:
            shown = ", ".join(f"{k}={v}" for k, v in figures)
            lines.append(f"{report.nodeid.rsplit('/', 1)[-1]}: {shown}")
    if lines:
        terminalreporter.write_sep("-", "reliability figures (checked)")
        for line in lines:
            terminalreporter.write_line(line)
