"""The publish gate: exactly the four expected runtime wheels, or nothing is published.

The expected names come from ``platforms.json`` (one ``wheel_tag`` per platform) and the
version in ``src/dsh/_version.py``; a missing platform, a second build of one, or a
wheel with an unearned tag (``linux_x86_64``, ``none-any``) fails, naming each file.

    python wheels/publish_gate.py DIST_DIR
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def dsh_version(version_file: Path) -> str:
    """``__version__`` of ``_version.py``, read without importing dsh."""
    for node in ast.parse(version_file.read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "__version__"):
            return str(ast.literal_eval(node.value))
    raise ValueError(f"{version_file}: no __version__")


def expected_wheels(version: str, platforms: dict[str, dict[str, str]]) -> set[str]:
    """The file name of each platform's runtime wheel."""
    return {f"dsh_runtime_bin-{version}-py3-none-{entry['wheel_tag']}.whl"
            for entry in platforms.values()}


def gate_problems(found: set[str], expected: set[str]) -> list[str]:
    """What keeps ``found`` from being exactly ``expected``; empty when it is."""
    return [*(f"missing {name}" for name in sorted(expected - found)),
            *(f"unexpected {name}" for name in sorted(found - expected))]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: publish_gate.py DIST_DIR", file=sys.stderr)
        return 2
    platforms = json.loads((HERE / "platforms.json").read_text(encoding="utf-8"))["platforms"]
    expected = expected_wheels(dsh_version(HERE.parent / "src/dsh/_version.py"), platforms)
    found = {path.name for path in Path(args[0]).rglob("*.whl")}
    problems = gate_problems(found, expected)
    for problem in problems:
        print(f"publish gate: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"publish gate: ok, {len(found)} wheels: {', '.join(sorted(found))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
