"""Guardrails: the one extension point allowed to block a tool call.

Hooks only observe; before a tool runs, the agent asks the :class:`GuardrailChain`, which
asks each guardrail in tree order. The first ``deny`` wins; otherwise any ``ask`` means
the agent must get approval; otherwise the call is allowed. The chain fails closed: a
guardrail that raises, overruns its budget or answers nonsense counts as a ``deny``.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from dsh.runtime.kernel.hooks import BudgetExceededError, run_bounded

DEFAULT_BUDGET = 5.0
"""Seconds an async guardrail may take to decide before it counts as a deny."""


class Decision(str, enum.Enum):
    """A guardrail's answer about one tool call."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


class Verdict(NamedTuple):
    """The chain's answer: a decision and, for deny/ask, which guardrail said why."""

    decision: Decision
    reason: str


class Guardrail(NamedTuple):
    """A registered guardrail of row ``row_id``.

    ``fn(call)`` gets the agent's tool-call description (opaque here) and returns a
    :class:`Decision` (or its string), or a ``(decision, reason)`` pair. A sync ``fn`` runs
    inline on the event loop and must be quick (a policy check); one that needs I/O should
    be async, and is then bounded by the chain's budget.
    """

    row_id: str
    name: str
    fn: Callable[[Any], Any]


class GuardrailChain:
    """The ordered guardrails of the running rows; ``await chain.check(call)`` decides."""

    def __init__(self, guardrails: Iterable[Guardrail] = (), *, budget: float = DEFAULT_BUDGET):
        self.budget = budget
        self._guardrails = tuple(guardrails)

    def set_guardrails(self, guardrails: Iterable[Guardrail]) -> None:
        """Replace the chain (kernel use)."""
        self._guardrails = tuple(guardrails)

    def __len__(self) -> int:
        return len(self._guardrails)

    def names(self) -> frozenset[str]:
        """The names of the guardrails in the chain."""
        return frozenset(g.name for g in self._guardrails)

    async def check(self, call: Any) -> Verdict:
        """First deny wins, else any ask → ask, else allow (also when the chain is empty)."""
        asked: Verdict | None = None
        for guardrail in self._guardrails:
            verdict = await self._decide(guardrail, call)
            if verdict.decision is Decision.DENY:
                return verdict
            if verdict.decision is Decision.ASK and asked is None:
                asked = verdict
        return asked or Verdict(Decision.ALLOW, "")

    async def _decide(self, guardrail: Guardrail, call: Any) -> Verdict:
        label = f"guardrail '{guardrail.name}'"
        try:
            answer = guardrail.fn(call)
            if inspect.isawaitable(answer):
                answer = await run_bounded(answer, self.budget)
        except BudgetExceededError:
            return Verdict(Decision.DENY, f"{label} did not decide within {self.budget} s")
        except Exception as exc:
            return Verdict(Decision.DENY, f"{label} failed: {type(exc).__name__}: {exc}")
        pair = isinstance(answer, tuple) and len(answer) == 2
        decision, reason = answer if pair else (answer, "")
        try:
            decision = Decision(decision)
        except ValueError:
            return Verdict(Decision.DENY, f"{label} returned no valid decision")
        return Verdict(decision, f"{label}: {reason}" if reason else label)
