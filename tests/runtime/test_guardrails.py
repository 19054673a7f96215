"""The guardrail chain: first deny wins, else ask, else allow; failures deny."""

from __future__ import annotations

import asyncio
from typing import Any

from dsh.runtime.kernel.guardrails import Decision, Guardrail, GuardrailChain, Verdict


def check(*fns: Any, budget: float = 5.0, call: Any = "call") -> Verdict:
    chain = GuardrailChain([Guardrail("r", f"g{i}", fn) for i, fn in enumerate(fns)],
                           budget=budget)
    return asyncio.run(chain.check(call))


def test_empty_chain_allows() -> None:
    assert check() == (Decision.ALLOW, "")


def test_all_allow() -> None:
    assert check(lambda c: Decision.ALLOW, lambda c: "allow").decision is Decision.ALLOW


def test_any_ask_asks_with_the_first_askers_reason() -> None:
    verdict = check(lambda c: "allow", lambda c: ("ask", "writes outside cwd"),
                    lambda c: Decision.ASK)
    assert verdict == (Decision.ASK, "guardrail 'g1': writes outside cwd")


def test_first_deny_wins_and_stops_the_chain() -> None:
    later: list[Any] = []
    verdict = check(lambda c: "ask", lambda c: (Decision.DENY, "no"),
                    lambda c: later.append(c) or "deny")
    assert verdict == (Decision.DENY, "guardrail 'g1': no")
    assert later == []


def test_guardrail_sees_the_call_and_may_be_async() -> None:
    async def by_name(call: dict[str, str]) -> tuple[str, str]:
        await asyncio.sleep(0)
        return ("deny", "rm is off") if call["tool"] == "rm" else ("allow", "")

    assert check(by_name, call={"tool": "rm"}).decision is Decision.DENY
    assert check(by_name, call={"tool": "ls"}).decision is Decision.ALLOW


def test_raising_guardrail_fails_closed() -> None:
    def broken(call: Any) -> Decision:
        raise RuntimeError("policy file unreadable")

    assert check(lambda c: "allow", broken) == (
        Decision.DENY, "guardrail 'g1' failed: RuntimeError: policy file unreadable")


def test_nonsense_answer_fails_closed() -> None:
    assert check(lambda c: None) == (Decision.DENY, "guardrail 'g0' returned no valid decision")
    assert check(lambda c: "maybe").decision is Decision.DENY


def test_slow_async_guardrail_fails_closed() -> None:
    async def slow(call: Any) -> str:
        await asyncio.sleep(60)
        return "allow"

    assert check(slow, budget=0.05) == (Decision.DENY, "guardrail 'g0' did not decide within "
                                                       "0.05 s")


def test_chain_contents_swap() -> None:
    chain = GuardrailChain()
    chain.set_guardrails([Guardrail("r", "no", lambda c: "deny")])
    assert len(chain) == 1
    assert asyncio.run(chain.check(None)).decision is Decision.DENY
