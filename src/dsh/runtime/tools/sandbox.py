"""The shell tool's sandbox: bubblewrap, else Landlock, on Linux; Seatbelt on macOS.

**The ladder.** Which sandbox confines commands is decided once per process, at the first
need, and kept (:func:`rung`): on Linux **bubblewrap** when its trial run works (it is
tried for real: Docker's seccomp profile lets the binary start and then refuses its
namespaces, "Creating new namespace failed"); else **Landlock with seccomp**
(:mod:`dsh.runtime.tools.landlockrung`, applied in the command's own process by
:mod:`dsh.core.confinement`) when the kernel offers Landlock (5.13+, the highest ABI it
has) and its trial run works; else **none**: commands run unsandboxed and each result says
so, or, when the row says ``required``, every command is refused. On macOS the one rung
is Seatbelt. The rung in force is in ``dsh doctor``, in the description the model reads,
and on every result that ran with less than the row asked. Every shell command,
background job and sub-agent command (a sub-agent's runtime picks its own rung on the
same machine) is made ready for its rung by :func:`dsh.runtime.tools.confined.prepare`;
this module holds the policy, the ladder and the layout every rung is built from.

On macOS the same policy is a generated Seatbelt profile run by ``sandbox-exec``
(:mod:`dsh.runtime.tools.seatbelt`, whose docstring says what differs); Windows has no
sandbox dsh can use, so there every command runs unsandboxed and says so (or is refused
when the row requires the sandbox). The rest of this docstring is the Linux sandbox.

The shell row's ``sandbox`` config is a :class:`Policy`:

- ``mode``: ``off`` (a plain ``bash -c``), ``read-only`` (the whole filesystem read-only,
  the workspace too) or ``workspace-write`` (the session's workspace root and its granted
  roots read-write, the rest read-only; the root, not the moving working directory).
  Both sandboxed modes get private scratch space that vanishes with the command, because
  compilers and test runners need it and writes there reach nothing outside: an empty
  ``/tmp`` under bubblewrap, a fresh ``TMPDIR`` under Landlock (which cannot mount one).
- ``network``: ``false`` gives the command its own network namespace with only a loopback
  device, so no connection leaves it (not even to the host's 127.0.0.1); ``true`` shares
  the host's network; a list of host names allows exactly those, through a proxy in the
  runtime (:mod:`dsh.runtime.tools.netproxy`) that the command reaches through the
  standard proxy variables. Under bubblewrap the command keeps its own network namespace
  and finds the proxy on its own ``127.0.0.1`` through a relay
  (:mod:`dsh.core.netrelay`) and a unix socket bound in; under Landlock it may connect
  to the proxy's port and to nothing else.
- ``required``: when no rung can run, every command is refused with a clear tool
  error instead of running unsandboxed. Not required, the command runs unsandboxed and its
  result says so in one line.
- ``readable``: paths shown read-only although they lie in a hidden home (toolchains such
  as ``~/.cargo`` or a virtualenv kept in the home).
- ``hide``: more paths covered by an empty tmpfs like the homes (a sub-agent's shell
  gets its parent's dsh home here, since the child's own home lies inside it).
- ``path_toolchains`` (default true): every ``PATH`` entry inside a hidden home is shown
  read-only too, with its toolchain root when the entry is a ``bin`` or ``shims`` folder
  (``~/.pyenv/shims`` shows ``~/.pyenv``), so a sandboxed ``python3`` or ``cargo`` is the
  same program the user runs outside; without it a pyenv or rustup user would silently get
  the system's interpreter or none.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from dsh.core import process
from dsh.core.errors import ConfigError, DshError
from dsh.runtime.kernel.envpolicy import scrubbed
from dsh.runtime.tools import bubblewrap, netproxy, seatbelt
from dsh.runtime.tools.confine import config_paths

_LINUX = sys.platform.startswith("linux")
_MACOS = sys.platform == "darwin"

OFF = "off"
READ_ONLY = "read-only"
WORKSPACE_WRITE = "workspace-write"
MODES = (OFF, READ_ONLY, WORKSPACE_WRITE)

CONFIG_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "default": {},
    "description": "Run each command inside a sandbox: bubblewrap on Linux, Seatbelt on "
                   "macOS (none on Windows).",
    "properties": {
        "mode": {"type": "string", "enum": list(MODES), "default": OFF,
                 "description": "off, read-only, or workspace-write (cwd writable)."},
        "network": {"type": ["boolean", "array"], "items": {"type": "string"},
                    "default": False,
                    "description": "false: no network; true: the host's network; a list "
                                   "of host names (pypi.org, *.example.com, host:port): "
                                   "only those, through a proxy in the runtime."},
        "required": {"type": "boolean", "default": False,
                     "description": "Refuse commands when the sandbox cannot run, "
                                    "instead of running them unsandboxed."},
        "readable": {"type": "array", "items": {"type": "string"}, "default": [],
                     "description": "Absolute or ~/ paths shown read-only inside a "
                                    "hidden home."},
        "hide": {"type": "array", "items": {"type": "string"}, "default": [],
                 "description": "Absolute or ~/ paths hidden like the homes."},
        "path_toolchains": {"type": "boolean", "default": True,
                            "description": "Show PATH entries inside a hidden home (and "
                                           "their bin/shims parent) read-only."},
        "bwrap": {"type": "string", "default": "",
                  "description": "The bubblewrap executable; default bwrap on PATH."},
    },
    "additionalProperties": False,
}
"""The ``sandbox`` key of the shell row's config schema."""

_PROC = "/proc"  # platform: every Linux sandbox shows a /proc of its own
_PROBE_TIMEOUT = bubblewrap.PROBE_TIMEOUT
"""Seconds a trial run (bubblewrap's, Seatbelt's, Landlock's) may take."""


class SandboxUnavailableError(DshError):
    """A required sandbox cannot run; the message is written for the model."""


class Policy(NamedTuple):
    """One shell row's sandbox settings, checked."""

    mode: str = OFF
    network: bool | tuple[str, ...] = False
    """False, True, or the allow-list's host entries (never empty: ``[]`` is False)."""
    required: bool = False
    readable: tuple[str, ...] = ()
    bwrap: str = ""
    path_toolchains: bool = True
    hide: tuple[str, ...] = ()
    row_id: str = "shell"

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, *, row_id: str = "shell") -> Policy:
        """The policy of a validated ``sandbox`` config; contradictions are config errors."""
        config = config or {}
        mode = config.get("mode", OFF)
        where = f"row '{row_id}' config.sandbox"
        if mode not in MODES:
            raise ConfigError(f"{where}.mode: expected one of {', '.join(MODES)}")
        if config.get("required") and mode == OFF:
            raise ConfigError(f"{where}.required: true needs mode read-only or "
                              "workspace-write, not off")
        raw = config.get("network", False)
        network: bool | tuple[str, ...]
        if isinstance(raw, bool):
            network = raw
        elif isinstance(raw, (list, tuple)):
            network = netproxy.parse_hosts(raw, f"{where}.network") or False
        else:
            raise ConfigError(f"{where}.network: expected true, false or a list of hosts")
        return cls(mode, network, bool(config.get("required")),
                   config_paths(config, "readable", where), config.get("bwrap", ""),
                   bool(config.get("path_toolchains", True)),
                   config_paths(config, "hide", where), row_id)

    @property
    def hosts(self) -> tuple[str, ...]:
        """The allow-list (empty unless ``network`` is a list)."""
        return self.network if isinstance(self.network, tuple) else ()

    @property
    def setting(self) -> str:
        """Where the allow-list is configured, as refusals name it."""
        return f"row '{self.row_id}' config.sandbox.network"

    def to_config(self) -> dict[str, Any]:
        """The ``sandbox`` config that gives this policy (what a sub-agent's shell inherits)."""
        return {"mode": self.mode,
                "network": list(self.hosts) if self.hosts else self.network,
                "required": self.required, "readable": list(self.readable),
                "bwrap": self.bwrap, "path_toolchains": self.path_toolchains,
                "hide": list(self.hide)}

    def sentence(self, found: Rung | None = None) -> str:
        """What the model is told about the sandbox in the tool description ('' when off):
        the policy, and the rung that keeps it here (``found``: default :func:`rung`)."""
        if self.mode == OFF:
            return ""
        found = found or rung(self)
        if found.name == NONE:
            refused = "every command is refused" if self.required else \
                "commands run unsandboxed, with your rights"
            return f"No sandbox can run on this machine ({found.reason}): {refused}."
        scratch = "a private /tmp" if found.name != LANDLOCK else \
            "a private temporary directory ($TMPDIR; /tmp itself is not writable)"
        writable = (f"nothing is writable but {scratch}" if self.mode == READ_ONLY else
                    f"only the working directory and {scratch} are writable")
        home = "the home directory is hidden" if found.name != LANDLOCK else \
            "the home directory is unreadable"
        if self.hosts:
            network = ("network access goes only to " + ", ".join(self.hosts)
                       + ", through the proxy in HTTP_PROXY/HTTPS_PROXY")
            if (found.name == LANDLOCK and found.abi < 4) or found.name == SEATBELT:
                network = "there is no network access (this sandbox cannot keep an allow-list)"
        else:
            network = "network access is allowed" if self.network else \
                "there is no network access"
        return (f"Commands run in a sandbox ({found.label()}): {writable}, {home}, and "
                f"{network}; a refused write or connection fails inside the command.")

    def describe(self) -> str:
        """The policy in a few words, for the tool description and ``dsh doctor``."""
        if self.mode == OFF:
            return "off"
        network = (f"network only {', '.join(self.hosts)} (proxy)" if self.hosts else
                   f"network {'allowed' if self.network else 'off'}")
        return f"{self.mode}, {network}{', required' if self.required else ''}"


class Probe(NamedTuple):
    """Whether bubblewrap can sandbox commands here; ``reason`` says why not."""

    usable: bool
    reason: str = ""


_PROBES: dict[tuple[str, bool], Probe] = {}
"""Trial results by (bwrap path, network allowed): namespaces do not appear mid-run."""
_TRYING = threading.Lock()
"""Held while a trial runs, so a caller meeting one in flight (:func:`prewarm`'s) waits for
its result instead of running a second."""

BUBBLEWRAP = "bubblewrap"
LANDLOCK = "landlock"
SEATBELT = "seatbelt"
NONE = "none"


class Rung(NamedTuple):
    """The sandbox that confines commands here: ``name`` (:data:`BUBBLEWRAP`,
    :data:`LANDLOCK`, :data:`SEATBELT` or :data:`NONE`), why the rungs above it did not
    apply (``reason``, '' for the first), and Landlock's ABI."""

    name: str
    reason: str = ""
    abi: int = 0

    def label(self) -> str:
        """The rung in a few words."""
        if self.name == LANDLOCK:
            return f"Landlock ABI {self.abi} with seccomp"
        return {BUBBLEWRAP: "bubblewrap", SEATBELT: "Seatbelt (sandbox-exec)"}.get(
            self.name, "none")

    def gaps(self, policy: Policy) -> list[str]:
        """What this rung keeps of ``policy`` less well than bubblewrap, in words (for
        ``dsh doctor``); empty for bubblewrap."""
        if self.name != LANDLOCK:
            return []
        found = ["no pid namespace", "/tmp replaced by a fresh $TMPDIR",
                 "modes and timestamps of the user's files outside the workspace can be "
                 "changed (Landlock restricts content, not metadata)"]
        if self.abi < 6:
            found.append("signals to processes outside the sandbox not scoped (Landlock "
                         "ABI 6, Linux 6.12)")
        if self.abi < 9:
            found.append("unix sockets reachable by path, under /tmp and the home too "
                         "(Landlock ABI 9, Linux 7.1)")
        if policy.hosts and self.abi < 4:
            found.append("no TCP rules (Landlock ABI 4, Linux 6.7): the allow-list cannot be "
                         "kept, so commands get no network")
        elif not policy.network and self.abi < 4:
            found.append("network cut by seccomp alone (Landlock ABI 4 adds TCP rules)")
        return found


_LANDLOCK_TRIAL: list[Probe] = []
"""The Landlock rung's one trial result for this process."""


def probe(policy: Policy) -> Probe:
    """Whether ``policy``'s sandbox runs here, trying it once per process.

    A missing binary is looked up again on every call (cheap, and installing it then
    takes effect); a binary that failed its trial stays failed until the process ends.
    """
    if _MACOS:
        with _TRYING:
            return _probe_seatbelt(policy.network is True)
    if not _LINUX:
        if sys.platform == "win32":
            return Probe(False, "Windows has no sandbox dsh can use (commands run with "
                                "your rights)")
        return Probe(False, f"dsh has no sandbox for {sys.platform}")
    name = policy.bwrap or "bwrap"
    exe = shutil.which(name)
    if exe is None:
        return Probe(False, f"{os.path.basename(name)} was not found (install the "
                            "bubblewrap package)")
    shared = policy.network is True
    key = (exe, shared)
    with _TRYING:
        if key not in _PROBES:
            _PROBES[key] = Probe(*bubblewrap.trial(exe, shared))
        return _PROBES[key]


def rung(policy: Policy) -> Rung:
    """The rung that confines ``policy``'s commands here (see the module docstring)."""
    if policy.mode == OFF:
        return Rung(NONE, "the sandbox is off")
    bwrap = probe(policy)
    if bwrap.usable:
        return Rung(SEATBELT if _MACOS else BUBBLEWRAP)
    if not _LINUX:
        return Rung(NONE, bwrap.reason)
    landlock = landlock_probe()
    if landlock.usable:
        from dsh.core import landlock as ll

        return Rung(LANDLOCK, bwrap.reason, ll.abi())
    return Rung(NONE, f"{bwrap.reason}, and {landlock.reason}")


def prewarm(policy: Policy) -> None:
    """Start finding ``policy``'s rung in a thread of its own while the runtime loads
    (the shell row calls it from ``apply``), so its trial runs (a bubblewrap or Landlock
    ``true``, and the first child's containment set up) overlap the rest of the start
    instead of holding up the first ``tools/list``, whose shell tool description names the
    rung. Whoever asks meanwhile waits for the same trial; its result is never kept beyond
    the process (a machine's sandbox can change between runs)."""
    if policy.mode != OFF:
        threading.Thread(target=rung, args=(policy,), name="dsh-sandbox-trial",
                         daemon=True).start()


def landlock_probe() -> Probe:
    """Whether the Landlock rung runs here: the kernel offers Landlock on a machine dsh
    has seccomp numbers for, and ``true`` runs confined (once per process)."""
    with _TRYING:
        if not _LANDLOCK_TRIAL:
            _LANDLOCK_TRIAL.append(_landlock_trial())
        return _LANDLOCK_TRIAL[0]


def _landlock_trial() -> Probe:
    """Run ``true`` confined by a minimal Landlock ruleset with the seccomp filter."""
    from dsh.core.confinement import Confinement, available

    level, why = available()
    if level < 1:
        found = Probe(False, f"Landlock cannot run here: {why}")
    else:
        from dsh.core import landlock

        true = shutil.which("true") or "/bin/true"
        trial = Confinement((("/", landlock.READ), ("/dev/null", landlock.DEVICE)))
        try:
            proc = process.run([true], timeout=_PROBE_TIMEOUT, env=scrubbed(os.environ),
                               confine=trial)
        except OSError as exc:
            found = Probe(False, f"Landlock cannot confine a command here: {exc}")
        else:
            found = Probe(True) if proc.returncode == 0 and not proc.timed_out else Probe(
                False, f"Landlock's trial run failed (exit status {proc.returncode})")
    return found


def _probe_seatbelt(network: bool) -> Probe:
    """Run ``/usr/bin/true`` under a profile generated as every command's is (so a macOS
    that rejects its syntax, or an outer sandbox that forbids a nested one, shows here)."""
    key = (seatbelt.SANDBOX_EXEC, network)
    if key in _PROBES:
        return _PROBES[key]
    if not os.access(seatbelt.SANDBOX_EXEC, os.X_OK):
        return Probe(False, f"{seatbelt.SANDBOX_EXEC} was not found")
    text = seatbelt.profile(writable=True, network=network, roots=(), hidden=(),
                            readable=(), masked=(), private=(), scratch=())
    try:
        proc = process.run(seatbelt.argv(text, ["/usr/bin/true"]), timeout=_PROBE_TIMEOUT,
                           env=scrubbed(os.environ))
    except OSError as exc:
        found = Probe(False, f"sandbox-exec cannot be started: {exc.strerror or exc}")
    else:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        found = Probe(True) if proc.returncode == 0 and not proc.timed_out else Probe(
            False, "sandbox-exec cannot apply a profile here ("
            + (lines[-1] if lines else f"exit status {proc.returncode}") + ")")
    _PROBES[key] = found
    return found


class Plan(NamedTuple):
    """What one command's sandbox shows and hides (real paths), every rung's input:
    the working directory, the writable ``roots``, the ``hidden`` directories (the homes,
    ``hide``, protected), the ``private`` ones among them (the dsh home and protected,
    never shown even inside a root), what is ``readable`` inside a hidden one, the
    ``masked`` ``.env`` and the path of the dsh home's ``.env`` (``secrets``)."""

    cwd: str
    roots: list[str]
    hidden: list[str]
    private: list[str]
    readable: list[str]
    masked: list[str]
    secrets: str | None


def plan_for(policy: Policy, cwd: str, *, workspace: str | None, writable: Sequence[str],
             protected: Sequence[str], home: str | None,
             env: Mapping[str, str] | None) -> Plan:
    """The :class:`Plan` of a command in ``cwd`` (arguments as for :func:`wrap`)."""
    real_cwd = os.path.realpath(cwd)
    roots = list(dict.fromkeys(os.path.realpath(p) for p in (workspace or cwd, *writable)))
    shown = [] if any(_inside(real_cwd, root) for root in roots) else [real_cwd]
    secrets = os.path.join(home, ".env") if home else None
    masked = [os.path.realpath(secrets)] if secrets and os.path.isfile(secrets) else []
    private = _hidden_dirs(home, protected, user=False)
    hidden = _hidden_dirs(home, (*policy.hide, *protected))
    readable = [*policy.readable, *shown]
    if policy.path_toolchains:
        search = (env if env is not None else os.environ).get("PATH", "")
        readable += toolchains(search, hidden, home)
    return Plan(real_cwd, roots, hidden, private, readable, masked, secrets)


def wrap(policy: Policy, argv: Sequence[str], cwd: str, *, workspace: str | None = None,
         writable: Sequence[str] = (), protected: Sequence[str] = (),
         home: str | None = None, env: Mapping[str, str] | None = None,
         binds: Sequence[str] = ()) -> list[str]:
    """``argv`` as it runs in ``cwd`` under ``policy`` on the bubblewrap or Seatbelt rung.

    ``workspace`` is the session's workspace root, the one ``workspace-write`` makes
    writable (default ``cwd``), and ``writable`` its granted roots, writable too; a
    ``cwd`` outside all of them stays read-only (and is shown even in a hidden home, so
    the command can start there). ``home`` is the dsh home and ``protected`` the other
    directories no command may see (each hidden, never writable); ``env`` is the
    environment the process will be given (names the dsh home's ``.env`` set are removed
    before bwrap starts); ``binds`` are host directories bound writable at the same path
    (the allow-list relay's socket folder). Returns ``argv`` unchanged when the mode is
    off; raises :class:`SandboxUnavailableError` when neither bubblewrap nor Seatbelt runs
    here (:func:`dsh.runtime.tools.confined.prepare` walks the whole ladder). Tying the
    command to the runtime and its resource limits are :mod:`dsh.core.process`'s, for
    every rung alike.
    """
    if policy.mode == OFF:
        return list(argv)
    found = probe(policy)
    if not found.usable:
        raise SandboxUnavailableError(found.reason)
    plan = plan_for(policy, cwd, workspace=workspace, writable=writable,
                    protected=protected, home=home, env=env)
    if _MACOS:
        text = seatbelt.profile(
            writable=policy.mode == WORKSPACE_WRITE, network=policy.network is True,
            roots=[root for root in plan.roots if os.path.isdir(root)], hidden=plan.hidden,
            readable=[os.path.realpath(p) for p in plan.readable if os.path.exists(p)],
            masked=plan.masked, private=plan.private, scratch=scratch_dirs())
        return [*bubblewrap.unset(from_secrets(env, plan.secrets)), *seatbelt.argv(text, argv)]
    exe = shutil.which(policy.bwrap or "bwrap") or "bwrap"
    return [*bubblewrap.unset(from_secrets(env, plan.secrets)),
            *bubblewrap.argv(exe, argv, network=policy.network is True,
                             writable=policy.mode == WORKSPACE_WRITE, roots=plan.roots,
                             hidden=plan.hidden, readable=plan.readable, masked=plan.masked,
                             private=plan.private, cwd=plan.cwd, binds=binds)]


def scratch_dirs() -> list[str]:
    """Where a Seatbelt-sandboxed command may write scratch files (real paths): the
    machine's ``/tmp`` and this user's temporary folder (``TMPDIR``)."""
    found: list[str] = []
    for path in ("/tmp", tempfile.gettempdir()):
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in found:
            found.append(real)
    return found


def toolchains(search_path: str, hidden: Sequence[str], home: str | None = None) -> list[str]:
    """The ``PATH`` entries inside a hidden directory, a ``bin``/``shims`` entry as its parent.

    The parent matters because a launcher in ``bin`` usually runs code beside it
    (``~/.pyenv/shims/python`` execs ``~/.pyenv/versions/...``). The dsh home itself is
    never shown this way, whatever PATH says.
    """
    found: list[str] = []
    private = os.path.realpath(home) if home else None
    for entry in search_path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry)
        if private is not None and _inside(real, private):
            continue
        cover = next((h for h in hidden if _inside(real, h)), None)
        if cover is None or real == cover:
            continue
        if os.path.basename(real) in ("bin", "shims") and os.path.dirname(real) != cover:
            real = os.path.dirname(real)
        if real not in found:
            found.append(real)
    return found


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def in_force(policy: Policy) -> str:
    """The rung that confines a command under ``policy`` here, as a tool call's fact and a
    span's attribute: ``off`` (the mode), ``bubblewrap``, ``seatbelt`` or ``landlock``
    (:func:`rung`), or ``none`` (no rung runs: the command runs unsandboxed, or is refused
    when the policy requires it)."""
    return OFF if policy.mode == OFF else rung(policy).name


def note(policy: Policy) -> str:
    """The one line a result carries when the command ran without any sandbox ('' if not).

    Empty for mode off (nothing was promised) and when required (nothing ran).
    """
    if policy.mode == OFF or policy.required:
        return ""
    found = rung(policy)
    if found.name != NONE:
        return ""
    return f"[Not sandboxed: {found.reason}; this command ran without the {policy.mode} sandbox]"


def _hidden_dirs(home: str | None, more: Sequence[str] = (), *,
                 user: bool = True) -> list[str]:
    """The user's home (unless ``user`` is false), the dsh home and ``more``, as real
    existing directories but ``/``."""
    candidates = [os.path.expanduser("~"), os.environ.get("HOME", "")] if user else []
    candidates += [home or "", *more]
    if user and hasattr(os, "getuid"):
        import pwd

        # A uid without a passwd entry (common in containers) has no home there.
        with contextlib.suppress(KeyError):
            candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    found: list[str] = []
    for path in candidates:
        real = os.path.realpath(path) if path else ""
        # A sandbox mounts a /proc of its own: the host's is never what it sees.
        if real and real != "/" and not _inside(real, _PROC) and os.path.isdir(real) \
                and real not in found:
            found.append(real)
    return found


def from_secrets(env: Mapping[str, str] | None, secrets: str | None) -> list[str]:
    """The names of ``env`` whose value came from the dsh home's ``.env`` (``secrets``)."""
    origin = getattr(env, "origin", None)
    if env is None or secrets is None or origin is None:
        return []
    return [name for name in sorted(env)
            if os.path.normpath(origin(name) or "/") == os.path.normpath(secrets)]
