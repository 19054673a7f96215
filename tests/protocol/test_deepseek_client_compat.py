"""Compatibility with a client nobody here wrote: the published DeepSeek Harness SDK.

Its ``DeepSeekHarness`` spawns ``<dsh_bin> --profile P --patch ...`` with ``DSH_HOME`` set
and speaks the SDK protocol; given our ``dsh`` script it must drive our runtime unchanged
(DESIGN.md section 8). Installed for the tests without its own runtime wheel:

    pip install --no-deps --pre 'deepseek-harness-sdk==0.2.1rc2'
    pip install 'pydantic>=2.12,<3'
"""

from __future__ import annotations

from pathlib import Path

import pytest
from runtimeproc import OFFLINE_PATCH, dsh_script

harness_api = pytest.importorskip(
    "deepseek_harness",
    reason="the published client is not installed: pip install --no-deps --pre "
    "'deepseek-harness-sdk==0.2.1rc2' 'pydantic>=2.12,<3'",
)

pytestmark = [
    pytest.mark.skipif(
        not OFFLINE_PATCH.exists(), reason=f"the offline example is missing: {OFFLINE_PATCH}"),
    # That client never closes its subprocess's stdout/stderr pipes; not ours to fix.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PROMPT = "Where am I? Then look at the parent directory."


def final_answer() -> str:
    """The scripted model's last response (examples/offline/script.yml)."""
    import yaml

    script = yaml.safe_load((OFFLINE_PATCH.parent / "script.yml").read_text())
    return str(script[-1]["text"])


def harness(home: Path, workdir: Path) -> object:
    return harness_api.DeepSeekHarness(
        dsh_bin=str(dsh_script()),
        dsh_home=str(home),
        profile="sdk-minimal",
        patches=(str(OFFLINE_PATCH),),
        provider="scripted",
        model="scripted",
        cwd=str(workdir),
        initialize_timeout_seconds=60,
        request_timeout_seconds=60,
        shutdown_timeout_seconds=10,
    )


def test_run_returns_the_scripted_answer(dsh_home: Path) -> None:
    with harness(dsh_home, Path.cwd()) as client:
        result = client.run(PROMPT, session_id="compat-1")
    assert result.final_response == final_answer()
    assert result.finish_reason == "completed"
    types = [event["type"] for event in result.events]
    assert types[0] == "agent/inbox/spliced" and types[-1] == "turn/end"
    assert "tool/call" in types and "tool/result" in types


def test_resume_and_working_directory_in_one_runtime(dsh_home: Path) -> None:
    workdir = Path.cwd()
    sub = workdir / "sub"
    sub.mkdir()
    with harness(dsh_home, workdir) as client:
        session = client.start_session("compat-2")
        assert session.run(PROMPT).finish_reason == "completed"
        # The script's second tool call asked to move to the parent directory, outside
        # the workspace root: with no client to approve it, the session stayed.
        assert Path(session.get_working_directory()) == workdir
        resumed = client.resume_session("compat-2")  # idle and live: resumable
        assert Path(resumed.set_working_directory(str(sub))) == sub
        assert Path(resumed.set_working_directory("..")) == workdir
        assert Path(resumed.get_working_directory()) == workdir


def test_resume_in_a_new_runtime(dsh_home: Path) -> None:
    workdir = Path.cwd()
    with harness(dsh_home, workdir) as client:
        assert client.run(PROMPT, session_id="compat-3").finish_reason == "completed"
    with harness(dsh_home, workdir) as client:  # a new runtime process, same home
        session = client.resume_session("compat-3")
        assert Path(session.get_working_directory()) == workdir


def test_resume_of_an_unknown_session_fails(dsh_home: Path) -> None:
    with harness(dsh_home, Path.cwd()) as client, pytest.raises(Exception, match="unknown"):
        client.resume_session("never-was")
