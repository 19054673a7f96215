"""Give a runtime wheel the platform tag its binaries earn, and only that.

A platform tag is a claim about every native file inside the wheel, so it is earned by
inspecting them with the platform's own auditing tool, never copied from a table:

* **Linux** (the hook tags ``linux_<arch>``): ``auditwheel show --json``; a wheel it finds
  non-portable (external libraries, or no better tag than ``linux_*``) is refused, else
  it gets the reported ``manylinux_*`` tag;
* **macOS**: ``delocate-listdeps`` must find no library outside the wheel and the system
  (``/usr/lib``, ``/System``), and ``delocate-wheel --require-archs ARCH`` (into a
  scratch folder) must accept every binary for the tag's architecture; the tag it gives
  its copy (delocate 0.11+: the oldest macOS every binary supports) is the earned one;
* **Windows**: ``delvewheel show`` must find no DLL to copy in (everything is in the
  wheel or the system), and every ``.exe``/``.dll``/``.pyd`` must be built for the tag's
  machine (read from its PE header): ``win_amd64`` is then earned.

The wheel itself is never repaired (a repair would graft libraries into the payload and
break ``runtime.json``): the verdict is applied by rewriting the tag alone. This script
is cibuildwheel's ``repair-wheel-command`` on every platform and the smoke test's step
for a local Linux build.

With ``--check-platforms`` the earned tag must also be the one ``platforms.json`` expects
for that wheel, so a change of build image shows up here, not at the publish gate.

    python wheels/earn_tag.py [--check-platforms] [--dest DIR] WHEEL
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

PLATFORMS = Path(__file__).resolve().with_name("platforms.json")


class TagError(Exception):
    """The wheel cannot earn a portable tag; the message says why."""


def earned_tag(report: dict[str, Any]) -> str:
    """The platform tag from an ``auditwheel show --json`` report, if it is portable."""
    tag = str(report.get("overall_tag", ""))
    if report.get("pure") or not tag:
        raise TagError(f"auditwheel found no native code in {report.get('wheel')}")
    if not tag.startswith(("manylinux_", "musllinux_")):
        external = sorted(report.get("external_libs") or {})
        raise TagError(f"auditwheel reports {tag!r} for {report.get('wheel')}: not portable"
                       + (f" (external libraries: {', '.join(external)})" if external else ""))
    return tag


def expected_tag(build_tag: str, platforms: dict[str, Any]) -> str:
    """The tag ``platforms.json`` expects for a wheel the hook tagged ``build_tag``."""
    for entry in platforms["platforms"].values():
        if entry["build_tag"] == build_tag:
            return str(entry["wheel_tag"])
    raise TagError(f"no platform in platforms.json builds as {build_tag!r}")


def wheel_platform_tag(wheel: Path) -> str:
    """The platform part of a wheel's file name (``linux_x86_64``)."""
    return wheel.name.removesuffix(".whl").split("-")[-1]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def retag(wheel: Path, platform_tag: str, dest: Path) -> Path:
    """Copy ``wheel`` into ``dest`` with its platform tag replaced (WHEEL, RECORD, name)."""
    old = wheel_platform_tag(wheel)
    target = dest / wheel.name.replace(f"-{old}.whl", f"-{platform_tag}.whl")
    with zipfile.ZipFile(wheel) as source:
        infos = source.infolist()
        # The wheel's own dist-info is top-level; the payload carries others (click's).
        wheel_meta = next(i.filename for i in infos if i.filename.count("/") == 1
                          and i.filename.endswith(".dist-info/WHEEL"))
        record = wheel_meta.removesuffix("WHEEL") + "RECORD"
        text = source.read(wheel_meta).decode()
        new_meta = "".join(
            line.replace(f"-{old}", f"-{platform_tag}") if line.startswith("Tag: ") else line
            for line in text.splitlines(keepends=True)).encode()
        records = [
            f"{wheel_meta},{_record_hash(new_meta)},{len(new_meta)}"
            if line.startswith(f"{wheel_meta},") else line
            for line in source.read(record).decode().splitlines()
        ]
        dest.mkdir(parents=True, exist_ok=True)
        # Every member is deflated anew here, so at the strongest level (~0.7% smaller).
        with zipfile.ZipFile(target, "w") as out:
            for info in infos:
                data = source.read(info.filename)
                if info.filename == wheel_meta:
                    data = new_meta
                elif info.filename == record:
                    data = ("\n".join(records) + "\n").encode()
                out.writestr(info, data, compress_type=info.compress_type, compresslevel=9)
    return target


def audit(wheel: Path) -> dict[str, Any]:
    """``auditwheel show --json`` of ``wheel`` (auditwheel must be on PATH)."""
    try:
        proc = subprocess.run(["auditwheel", "show", "--json", str(wheel)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise TagError("auditwheel is not installed (pip install auditwheel)") from None
    if proc.returncode != 0:
        raise TagError(f"auditwheel show failed: {proc.stderr.strip()[-2000:]}")
    return dict(json.loads(proc.stdout))


def earn(wheel: Path) -> str:
    """The platform tag ``wheel``'s binaries earn, by its build tag's platform."""
    built = wheel_platform_tag(wheel)
    if built.startswith("linux_"):
        return earned_tag(audit(wheel))
    if built.startswith("macosx_"):
        return macos_tag(wheel, built.rsplit("_", 1)[1])
    if built.startswith("win"):
        return windows_tag(wheel, built)
    raise TagError(f"no way to earn a tag for a {built} wheel")


def _tool(argv: list[str], install: str) -> str:
    """``argv``'s output; a missing tool or a failure is a :class:`TagError`."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:
        raise TagError(f"{argv[0]} is not installed (pip install {install})") from None
    if proc.returncode != 0:
        raise TagError(f"{' '.join(argv[:2])} failed: "
                       f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc.stdout


# -- macOS ---------------------------------------------------------------------------------


def external_libraries(listdeps: str) -> list[str]:
    """Libraries outside the wheel in ``delocate-listdeps WHEEL`` output (which leaves out
    the system's): those reported by absolute path; the wheel's own are relative."""
    return [line.strip() for line in listdeps.splitlines() if line.strip().startswith("/")]


def macos_tag(wheel: Path, arch: str) -> str:
    """Audit a macOS wheel with delocate; the tag its check copy earns."""
    external = external_libraries(_tool(["delocate-listdeps", str(wheel)], "delocate"))
    if external:
        raise TagError(f"{wheel.name} needs libraries outside the wheel: "
                       f"{', '.join(external)}")
    with tempfile.TemporaryDirectory() as scratch:
        _tool(["delocate-wheel", "--require-archs", arch, "-w", scratch, str(wheel)],
              "'delocate>=0.11'")
        checked = sorted(Path(scratch).glob("*.whl"))
        if len(checked) != 1:
            raise TagError(f"delocate-wheel wrote {len(checked)} wheels, not one")
        tag = wheel_platform_tag(checked[0])
    if not tag.startswith("macosx_") or not tag.endswith(f"_{arch}"):
        raise TagError(f"delocate gives {tag!r}, not a macOS {arch} tag")
    return tag


# -- Windows -------------------------------------------------------------------------------

#: PE ``Machine`` values by Windows platform tag.
PE_MACHINES = {"win_amd64": 0x8664, "win_arm64": 0xAA64, "win32": 0x014C}


def dlls_to_copy(show: str) -> list[str]:
    """The DLLs ``delvewheel show`` would copy into the wheel (its "will be copied into
    the wheel." section; ``None`` there means none)."""
    lines = show.splitlines()
    start = next((i for i, line in enumerate(lines) if "will be copied into the wheel" in line),
                 None)
    if start is None:
        raise TagError("delvewheel show printed no list of DLLs to copy")
    found = []
    for line in lines[start + 1:]:
        if not line.startswith((" ", "\t")) or not line.strip():
            break
        if line.strip() != "None":
            found.append(line.strip())
    return found


def pe_machine(data: bytes) -> int | None:
    """The ``Machine`` field of a PE file's COFF header (None: not a PE file)."""
    if len(data) < 0x40 or data[:2] != b"MZ":
        return None
    (offset,) = struct.unpack_from("<I", data, 0x3C)
    if len(data) < offset + 6 or data[offset:offset + 4] != b"PE\0\0":
        return None
    (machine,) = struct.unpack_from("<H", data, offset + 4)
    return int(machine)


def pe_machines(wheel: Path) -> dict[str, int | None]:
    """Each ``.exe``, ``.dll`` and ``.pyd`` in ``wheel`` and its PE machine."""
    with zipfile.ZipFile(wheel) as zf:
        return {name: pe_machine(zf.read(name)) for name in zf.namelist()
                if name.lower().endswith((".exe", ".dll", ".pyd"))}


def windows_tag(wheel: Path, built: str) -> str:
    """Audit a Windows wheel with delvewheel and the PE headers of its binaries."""
    wanted = PE_MACHINES.get(built)
    if wanted is None:
        raise TagError(f"unknown Windows platform {built!r}")
    copies = dlls_to_copy(_tool(["delvewheel", "show", "--ignore-existing", str(wheel)],
                                "delvewheel"))
    if copies:
        raise TagError(f"{wheel.name} needs DLLs outside the wheel: {', '.join(copies)}")
    machines = pe_machines(wheel)
    if not machines:
        raise TagError(f"{wheel.name} holds no Windows binary")
    wrong = sorted(name for name, machine in machines.items() if machine != wanted)
    if wrong:
        raise TagError(f"not built for {built} (PE machine {wanted:#06x}): "
                       f"{', '.join(wrong[:10])}")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--dest", type=Path, help="output folder (default: beside the wheel)")
    parser.add_argument("--check-platforms", action="store_true",
                        help="the earned tag must be the one platforms.json expects")
    args = parser.parse_args(argv)
    try:
        tag = earn(args.wheel)
        if args.check_platforms:
            wanted = expected_tag(wheel_platform_tag(args.wheel),
                                  json.loads(PLATFORMS.read_text(encoding="utf-8")))
            if tag != wanted:
                raise TagError(f"the audit earned {tag!r} but platforms.json expects "
                               f"{wanted!r}: update platforms.json or the build image")
        target = retag(args.wheel, tag, args.dest or args.wheel.parent)
    except TagError as exc:
        print(f"earn_tag: error: {exc}", file=sys.stderr)
        return 1
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
