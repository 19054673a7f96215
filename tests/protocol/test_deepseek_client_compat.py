"""Compatibility with a client nobody here wrote: the published DeepSeek Harness SDK.

Its ``DeepSeekHarness`` spawns ``<dsh_bin> --profile P --patch ...`` with ``DSH_HOME`` set
and speaks the SDK protocol; given our ``dsh`` script it must drive our runtime unchanged
(docs/contracts.md). Installed for the tests without its own runtime wheel:

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

PROMPT = "Where am I working?"


def final_answer(cwd: Path) -> str:
    """The scripted model's answer (examples/offline/script.yml) in ``cwd``, a folder
    without a pyproject.toml: it quotes where the session works."""
    return (f"You are working in `{cwd}`.\n\nThere is no `pyproject.toml` here to tell me "
            "what the project is.\n\nThis directory is the session's workspace root: my "
            "tools reach files here freely, and anything outside it only with your approval.")


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
    assert result.final_response == final_answer(Path.cwd())
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


def test_working_directory_of_sessions_that_never_ran_here(dsh_home: Path) -> None:
    """Its docs: get/set create a new session without running a turn, and load a stored
    one (without ``resume_session``)."""
    workdir = Path.cwd()
    sub = workdir / "sub"
    sub.mkdir()
    with harness(dsh_home, workdir) as client:
        notes = client.client.subscribe_notifications()
        fresh = client.start_session("compat-fresh")
        assert Path(fresh.get_working_directory()) == workdir
        assert Path(fresh.set_working_directory("sub")) == sub
        assert Path(fresh.get_working_directory()) == sub
        other = client.start_session("compat-fresh-2")
        assert Path(other.set_working_directory(str(sub))) == sub
        seen: list[object] = []
        notes.drain(seen.append)
        notes.close()
        assert seen == []  # no turn ran: not one event
        assert client.run(PROMPT, session_id="compat-ran").finish_reason == "completed"
    with harness(dsh_home, workdir) as client:  # a new runtime: each one is stored
        assert Path(client.start_session("compat-fresh").get_working_directory()) == sub
        stored = client.start_session("compat-ran")  # not resumed: loaded by the call
        assert Path(stored.get_working_directory()) == workdir
        assert Path(stored.set_working_directory(str(workdir))) == workdir
        assert stored.run(PROMPT).finish_reason == "completed"  # and it runs on


SUBAGENT_PARENT_SCRIPT = """\
- text: "delegating"
  tool_calls: [{name: subagent, arguments: {description: "count", prompt: "count to 3"}}]
- text: "parent done"
"""
SUBAGENT_CHILD_SCRIPT = """\
- text: "child answer 42"
"""
SUBAGENT_CHILD_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path child.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
"""
SUBAGENT_PARENT_PATCH = """\
- insert:
    - {id: llm-scripted, name: llm-scripted, config: {script: !path parent.yml}}
- {id: agent, merge: {config: {default_route: scripted}}}
- id: tools:subagent
  merge: {config: {patches: [%s]}}
"""


def test_subagent_events_reach_the_parents_client(dsh_home: Path, tmp_path: Path) -> None:
    """The client follows ``subagent.started {parentSessionId, childSessionId}`` and
    collects the child's ``session.event``s into the parent run's notifications."""
    (tmp_path / "parent.yml").write_text(SUBAGENT_PARENT_SCRIPT)
    (tmp_path / "child.yml").write_text(SUBAGENT_CHILD_SCRIPT)
    (tmp_path / "child-patch.yml").write_text(SUBAGENT_CHILD_PATCH)
    patch = tmp_path / "parent-patch.yml"
    patch.write_text(SUBAGENT_PARENT_PATCH % (tmp_path / "child-patch.yml"))
    client = harness_api.DeepSeekHarness(
        dsh_bin=str(dsh_script()), dsh_home=str(dsh_home), profile="sdk",
        patches=(str(patch),), provider="scripted", model="scripted", cwd=str(Path.cwd()),
        initialize_timeout_seconds=60, request_timeout_seconds=60,
        shutdown_timeout_seconds=10)
    with client:
        result = client.run("delegate it", session_id="compat-parent")
    assert result.finish_reason == "completed"
    assert result.final_response == "parent done"
    notes = [(n.method, n.payload) for n in result.notifications]
    started = [p for m, p in notes if m == "subagent.started"]
    assert [p["parentSessionId"] for p in started] == ["compat-parent"]
    child = started[0]["childSessionId"]
    assert child != "compat-parent"
    child_events = [p["event"] for m, p in notes
                    if m == "session.event" and p["sessionId"] == child]
    kinds = [e["type"] for e in child_events]
    assert kinds[0] == "agent/inbox/spliced" and kinds[-1] == "turn/end", kinds
    assert child_events[-1]["data"]["reason"]["kind"] == "completed"
    answers = ["".join(b.get("text", "") for b in e["data"]["message"]["content"])
               for e in child_events if e["type"] == "assistant/message"]
    assert answers == ["child answer 42"]
    # Relayed in order: announced first, the child's events, the parent's tool result.
    methods = [m for m, _ in notes]
    first_child = next(i for i, (m, p) in enumerate(notes)
                       if m == "session.event" and p["sessionId"] == child)
    assert methods.index("subagent.started") < first_child
    parent_results = [i for i, (m, p) in enumerate(notes) if m == "session.event"
                      and p["sessionId"] == "compat-parent"
                      and p["event"]["type"] == "tool/result"]
    assert first_child < parent_results[0]
    # The run's own events are the parent's alone.
    assert all(e.get("type") != "assistant/message" or "child" not in str(e)
               for e in result.events)
