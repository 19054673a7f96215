"""What a sub-agent runtime may see of its parent's environment.

A sub-agent is another runtime the model starts; it must not receive the parent's
credentials by default, because a prompt-injected task could otherwise exfiltrate them
through any tool the child has. So the child's environment is the parent's snapshot
under the shell's own filters (:func:`dsh.runtime.kernel.envpolicy.withheld`: every name
that looks like a credential or that a row declares secret, every value that looks like
one whatever its name, and every ``DSH_*`` name: the parent's home and runtime selection
are the parent's, never the child's), minus what the parent read from ``.env`` files (its
home's is not the child's; the working directory's the child reads itself), plus exactly
the names the row config lists in ``pass_env``, from wherever the parent got them and
whatever they look like: the deliberate way to hand one on (a provider key, or
OpenTelemetry's exporter headers for a child that reports its own traces). Values are
never formatted into messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dsh.runtime.kernel.envpolicy import withheld

ENVIRONMENT = "environment"
"""An :class:`~dsh.core.launch.EnvSnapshot` origin: the launch's own environment."""


def child_environment(parent: Mapping[str, str], pass_env: Iterable[str],
                      declared: Iterable[str] = ()) -> dict[str, str]:
    """The sub-agent's whole environment: ``parent`` (an EnvSnapshot, or any mapping
    taken as the launch environment) filtered (``declared``: the names the parent's rows
    declare secret), plus the ``pass_env`` names the parent has, unfiltered (a listed
    name the parent lacks is left out, not invented)."""
    declared = frozenset(declared)
    origin = getattr(parent, "origin", None)
    env = {k: v for k, v in parent.items() if not withheld(k, v, declared)
           and (origin is None or origin(k) == ENVIRONMENT)}
    for name in pass_env:
        if name in parent:
            env[name] = parent[name]
    return env
