"""Which runtime a client starts: the lookup order in docs/contracts.md.

``dsh_bin`` > ``DSH_RUNTIME_BIN`` > the installed ``dsh-runtime-bin`` wheel (``exe``
carrier) > ``sys.executable -m dsh`` (``python`` carrier: only where the python runtime's
packages, ``dsh-harness[python]``, are installed). An explicit choice (``dsh_bin``
or a non-blank ``DSH_RUNTIME_BIN``) that does not work is an error, never a cue to try the
next place: a bundled binary silently overriding the user's choice is a known pain of
other SDKs. When nothing is found, the error lists every place searched and why each
failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from dsh._version import __version__
from dsh.core.distribution import python_hint, runtime_hint
from dsh.core.errors import RuntimeNotFoundError
from dsh.sdk._config import ClientConfig

RuntimeCarrier = Literal["exe", "python"]
WHEEL_MODULE = "dsh_runtime_bin"
WHEEL_HINT = runtime_hint()


@dataclass(frozen=True)
class RuntimeInfo:
    """The runtime a client runs (``client.runtime``).

    ``command`` is what precedes ``--profile``: ``(path,)`` for an executable, or
    ``(python, "-P", "-m", "dsh")`` (:func:`dsh.core.process.python_command`: the runtime
    never imports from its working directory). ``source`` says which rung of the lookup chose it:
    ``dsh_bin``, ``DSH_RUNTIME_BIN``, ``dsh_runtime_bin`` or ``sys.executable``.
    ``version`` is the runtime's own (its ``serverInfo`` once the handshake is done;
    before it, what the installation says, ``None`` for an arbitrary executable).
    """

    carrier: RuntimeCarrier
    command: tuple[str, ...]
    source: str
    version: str | None

    @property
    def path(self) -> str:
        """The executable that is spawned."""
        return self.command[0]

    def describe(self) -> str:
        """``python (/usr/bin/python3 -m dsh)``: the carrier and its command line."""
        return f"{self.carrier} ({' '.join(self.command)})"


def locate(config: ClientConfig, environ: Mapping[str, str]) -> RuntimeInfo:
    """The runtime ``config`` selects, looked up in ``environ`` (the child's environment).

    Raises :class:`RuntimeNotFoundError` listing each place searched and its outcome.
    """
    searched: list[str] = []
    if config.carrier != "python":
        if config.dsh_bin is not None:
            return _explicit("dsh_bin", os.fspath(config.dsh_bin), environ, searched)
        searched.append("dsh_bin: not given")
        from_env = environ.get("DSH_RUNTIME_BIN", "")
        if from_env.strip():
            return _explicit("DSH_RUNTIME_BIN", from_env, environ, searched)
        searched.append("DSH_RUNTIME_BIN: not set")
        wheel = _from_wheel(searched)
        if wheel is not None:
            return wheel
    else:
        searched.append("dsh_bin, DSH_RUNTIME_BIN, dsh_runtime_bin: skipped (carrier='python')")
    if config.carrier != "exe":
        # The runtime's code ships in this package (dsh.runtime); what may be missing is
        # the python extra's packages, located without importing any of them.
        missing = _python_missing()
        if missing:
            searched.append(f"{sys.executable} -m dsh: the python runtime's packages are "
                            f"not installed ({', '.join(missing)}; {python_hint()})")
        else:
            from dsh.core.process import python_command  # loads subprocess: only to start one

            return RuntimeInfo("python", tuple(python_command("dsh")), "sys.executable",
                               __version__)
    else:
        searched.append("sys.executable -m dsh: skipped (carrier='exe')")
    raise _not_found(searched)


def _python_missing() -> tuple[str, ...]:
    from dsh.core.carriers import python_missing

    return python_missing()


def _explicit(source: str, raw: str, environ: Mapping[str, str],
              searched: list[str]) -> RuntimeInfo:
    path, problem = _check_executable(raw, environ)
    if problem is None:
        return RuntimeInfo("exe", (path,), source, None)
    searched.append(f"{source}: {path}: {problem}")
    raise _not_found(searched, hint=f"{source} was given explicitly, so no other runtime "
                                    "is tried in its place")


def _from_wheel(searched: list[str]) -> RuntimeInfo | None:
    # Imported outright, not looked up first: every client's start runs this, and a
    # find_spec before the import searches sys.path twice.
    try:
        import dsh_runtime_bin

        raw = os.fspath(dsh_runtime_bin.runtime_path())
    except ModuleNotFoundError as exc:
        if exc.name == WHEEL_MODULE:
            searched.append(f"{WHEEL_MODULE}: not installed ({WHEEL_HINT})")
        else:  # the package is there; something it imports is not
            searched.append(f"{WHEEL_MODULE}: installed but unusable ({exc})")
        return None
    except (ImportError, AttributeError, OSError, ValueError) as exc:
        searched.append(f"{WHEEL_MODULE}: installed but unusable ({exc})")
        return None
    path, problem = _check_executable(raw, {})
    if problem is not None:
        searched.append(f"{WHEEL_MODULE}: {path}: {problem}")
        return None
    version = getattr(dsh_runtime_bin, "__version__", None)
    return RuntimeInfo("exe", (path,), WHEEL_MODULE, version if isinstance(version, str)
                       else None)


def _check_executable(raw: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """``(absolute path, problem or None)``; a bare name is looked up on ``PATH``."""
    expanded = os.path.expanduser(raw)
    if os.sep not in expanded and (os.altsep is None or os.altsep not in expanded):
        # Here, not at the top: shutil brings zlib, bz2 and lzma (~2 ms) to every
        # ``import dsh.sdk``, and only a bare program name needs it.
        import shutil

        found = shutil.which(expanded, path=environ.get("PATH", os.defpath))
        if found is None:
            return expanded, "not found on PATH"
        expanded = found
    path = os.path.abspath(expanded)
    if not os.path.exists(path):
        return path, "no such file"
    if not os.path.isfile(path):
        return path, "not a file"
    if not os.access(path, os.X_OK):
        return path, "not executable (chmod +x?)"
    return path, None


def _not_found(searched: list[str], *, hint: str | None = None) -> RuntimeNotFoundError:
    places = "\n".join(f"  - {line}" for line in searched)
    return RuntimeNotFoundError(f"no dsh runtime found; searched:\n{places}", hint=hint)
