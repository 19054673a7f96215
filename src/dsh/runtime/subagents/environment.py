"""What a sub-agent runtime may see of its parent's environment.

A sub-agent is another runtime the model starts; it must not receive the parent's
credentials by default, because a prompt-injected task could otherwise exfiltrate them
through any tool the child has. So the child's environment is the parent's snapshot minus
every name that looks like a credential or that a row declares secret (the one list of
:mod:`dsh.runtime.kernel.envpolicy`, which the shell uses too) and every ``DSH_*`` name (the
parent's home and
runtime selection are the parent's, never the child's), and minus what the parent read
from ``.env`` files (its home's is not the child's; the working directory's the child
reads itself), plus exactly the names the row config lists in ``pass_env``, from
wherever the parent got them. Values are never formatted into messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dsh.runtime.kernel.envpolicy import is_secret

ENVIRONMENT = "environment"
"""An :class:`~dsh.core.launch.EnvSnapshot` origin: the launch's own environment."""


def scrubbed(name: str, declared: Iterable[str] = ()) -> bool:
    """Whether ``name`` is withheld from a sub-agent unless passed explicitly."""
    return name.upper().startswith("DSH_") or is_secret(name, declared)


def child_environment(parent: Mapping[str, str], pass_env: Iterable[str],
                      declared: Iterable[str] = ()) -> dict[str, str]:
    """The sub-agent's whole environment: ``parent`` (an EnvSnapshot, or any mapping
    taken as the launch environment) scrubbed (``declared``: the names the parent's rows
    declare secret), plus the ``pass_env`` names the parent has (a listed name the parent
    lacks is left out, not invented)."""
    declared = frozenset(declared)
    origin = getattr(parent, "origin", None)
    env = {k: v for k, v in parent.items() if not scrubbed(k, declared)
           and (origin is None or origin(k) == ENVIRONMENT)}
    for name in pass_env:
        if name in parent:
            env[name] = parent[name]
    return env
