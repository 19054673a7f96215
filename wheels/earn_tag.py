"""Give a Linux runtime wheel the platform tag ``auditwheel show`` reports, and only that.

The build hook tags a Linux wheel ``linux_<arch>``: a manylinux tag is a claim about every
native file inside, and only an audit can make it. This script runs ``auditwheel show
--json``, refuses a wheel it finds non-portable (external libraries, or no better tag
than ``linux_*``), and rewrites the wheel's tag to the reported one. It is cibuildwheel's
``repair-wheel-command`` on Linux (``auditwheel repair`` would graft libraries into the
payload and break ``runtime.json``) and the smoke test's step for a local build.

With ``--check-platforms`` the earned tag must also be the one ``platforms.json`` expects
for that wheel, so a change of build image shows up here, not at the publish gate.

    python wheels/earn_tag.py [--check-platforms] [--dest DIR] WHEEL
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import subprocess
import sys
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--dest", type=Path, help="output folder (default: beside the wheel)")
    parser.add_argument("--check-platforms", action="store_true",
                        help="the earned tag must be the one platforms.json expects")
    args = parser.parse_args(argv)
    try:
        tag = earned_tag(audit(args.wheel))
        if args.check_platforms:
            wanted = expected_tag(wheel_platform_tag(args.wheel),
                                  json.loads(PLATFORMS.read_text(encoding="utf-8")))
            if tag != wanted:
                raise TagError(f"auditwheel earned {tag!r} but platforms.json expects "
                               f"{wanted!r}: update platforms.json or the build image")
        target = retag(args.wheel, tag, args.dest or args.wheel.parent)
    except TagError as exc:
        print(f"earn_tag: error: {exc}", file=sys.stderr)
        return 1
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
