"""The shell sandbox on macOS: a generated Seatbelt profile run by ``sandbox-exec -p``.

The same promises as the bubblewrap sandbox (:mod:`dsh.runtime.tools.sandbox`), in
Apple's sandbox profile language (SBPL), a pure function of its inputs so the text can be
pinned in a test:

* everything is denied unless allowed (``deny default``); processes may start processes
  (the sandbox is inherited), signal and inspect only their own sandbox's processes, read
  system settings and reach the few system services a shell's tools need;
* the filesystem is readable, but the user's home, the dsh home, the shell row's ``hide``
  paths and the protected paths are not (``readable`` paths and ``PATH`` toolchains
  inside a hidden home are again); the workspace root and its granted roots are readable
  and, under ``workspace-write``, writable; scratch space (``/private/tmp`` and the
  user's ``TMPDIR``) is writable in both sandboxed modes; nothing else is;
* the dsh home and the protected paths are never readable or writable, also where they
  lie inside a root, and the dsh home's ``.env`` is unreadable even inside a root;
* no network unless the policy allows it (then outbound, inbound, DNS and TLS services).

SBPL applies the **last** rule that matches an operation. Path rules are therefore written
shallow to deep, as the bubblewrap mounts are ordered: whichever of "hide the home" and
"show the workspace" names the deeper path wins, and a protected directory inside a root
is denied again after the root is allowed. A directory on the way to a root (the user's
home above a project) may still be looked up (``file-read-metadata`` on the root's path
ancestors), so ``pwd -P`` and ``realpath`` work; its contents stay hidden.

What differs from bubblewrap, by the nature of Seatbelt: a hidden path answers
"Operation not permitted" instead of looking empty; ``/tmp`` is the machine's (shared),
not a private empty one; there is no pid namespace (processes of the sandbox may only
signal each other, and see others' ids). Paths are matched as the kernel resolves them,
so every path here is a real path (``/private/var/...``, not ``/var/...``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

SANDBOX_EXEC = "/usr/bin/sandbox-exec"

_BASE = """\
(version 1)
; dsh shell sandbox (Seatbelt). Generated: the last matching rule wins.
(deny default)
(allow process-exec process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow sysctl-read)
(allow user-preference-read)
(allow ipc-posix-sem)
(allow mach-lookup
  (global-name "com.apple.system.opendirectoryd.libinfo")
  (global-name "com.apple.system.logger")
  (global-name "com.apple.PowerManagement.control"))
(allow pseudo-tty)
(allow file-ioctl (literal "/dev/ptmx") (regex #"^/dev/ttys[0-9]+$"))
(allow file-read* file-write*
  (literal "/dev/null") (literal "/dev/zero") (literal "/dev/tty") (literal "/dev/ptmx")
  (literal "/dev/dtracehelper") (regex #"^/dev/ttys[0-9]+$") (regex #"^/dev/fd/[0-9]+$"))
; The filesystem is readable; the rules below take back what is hidden.
(allow file-read*)
"""

_NETWORK = """\
; Network allowed: connections, name resolution and certificate checks.
(allow network-outbound network-inbound system-socket)
(allow mach-lookup
  (global-name "com.apple.dnssd.service")
  (global-name "com.apple.SystemConfiguration.DNSConfiguration")
  (global-name "com.apple.SystemConfiguration.configd")
  (global-name "com.apple.trustd.agent")
  (global-name "com.apple.ocspd")
  (global-name "com.apple.SecurityServer")
  (global-name "com.apple.networkd"))
"""

_NO_NETWORK = "; No network: nothing above allows a socket to leave the sandbox.\n"


def string(path: str) -> str:
    """``path`` as an SBPL string literal (backslash and double quote escaped)."""
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _depth(path: str) -> int:
    return len([part for part in path.split("/") if part])


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def profile(*, writable: bool, network: bool, roots: Sequence[str], hidden: Sequence[str],
            readable: Iterable[str], masked: Iterable[str], private: Sequence[str],
            scratch: Sequence[str]) -> str:
    """The SBPL profile for one command (every path a real, absolute path).

    ``roots``: the workspace root and granted roots (read-write when ``writable``, else
    read-only); ``hidden``: directories not readable (homes, ``hide``, protected paths);
    ``readable``: paths shown again inside a hidden one (never inside a ``private``
    one); ``masked``: files never
    readable (the dsh home's ``.env``); ``private``: directories never readable or
    writable even inside a root (the dsh home, protected paths); ``scratch``: writable
    scratch folders (``/private/tmp``, ``TMPDIR``).
    """
    plan: list[tuple[int, int, str]] = []
    for path in hidden:
        plan.append((_depth(path), 0, f"(deny file-read* (subpath {string(path)}))"))
    shown = [path for path in readable if any(_inside(path, cover) for cover in hidden)
             and not any(_inside(path, never) for never in private)]
    for path in shown:
        plan.append((_depth(path), 1, f"(allow file-read* (subpath {string(path)}))"))
    access = "file-read* file-write*" if writable else "file-read*"
    for path in roots:
        plan.append((_depth(path), 2, f"(allow {access} (subpath {string(path)}))"))
    for path in scratch:
        plan.append((_depth(path), 2,
                     f"(allow file-read* file-write* (subpath {string(path)}))"))
    for path in masked:
        plan.append((_depth(path), 3, f"(deny file-read* file-write* (literal {string(path)}))"))
    for path in private:
        plan.append((_depth(path), 4,
                     f"(deny file-read* file-write* (subpath {string(path)}))"))
    plan.sort(key=lambda item: (item[0], item[1]))
    ancestors = [*roots, *shown]
    lines = [_BASE, "; Paths, shallow to deep: a deeper rule overrides a shallower one.\n"]
    lines += [rule + "\n" for _, _, rule in plan]
    if ancestors:
        lines.append("; The way to a root or a shown path may be looked up, not listed.\n")
        lines.append("(allow file-read-metadata"
                     + "".join(f" (path-ancestors {string(p)})" for p in ancestors) + ")\n")
    lines.append(_NETWORK if network else _NO_NETWORK)
    return "".join(lines)


def argv(profile_text: str, command: Sequence[str]) -> list[str]:
    """``command`` run under ``profile_text``."""
    return [SANDBOX_EXEC, "-p", profile_text, *command]
