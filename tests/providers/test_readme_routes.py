"""README's "Use a real model" section stays true: its route table is the shipped rows,
and its patch example composes and boots."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RunDsh = Callable[..., subprocess.CompletedProcess[str]]


def section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Use a real model")
    return text[start:text.index("\n## ", start + 1)]


def test_the_route_table_is_the_shipped_rows(run_dsh: RunDsh) -> None:
    dump = json.loads(run_dsh("--profile", "sdk", "--dump-config", "--json").stdout)
    shipped = {}
    for row in dump["rows"]:
        config = row.get("config") or {}
        if row.get("name") in ("llm-openai-compatible", "llm-anthropic",
                               "llm-openai-responses") and not row.get("disabled"):
            shipped[config["route"]] = (config["api_key_env"], config["base_url_env"],
                                        config["default_model"])
    table = {}
    for line in section().splitlines():
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0] in shipped:
            key = None if cells[2] == "none" else cells[2]
            base = re.match(r"`?([A-Z_]+)`?", cells[3]).group(1)  # type: ignore[union-attr]
            table[cells[0]] = (key, base, cells[4])
    assert table == shipped


def test_the_patch_example_composes_and_boots(run_dsh: RunDsh, tmp_path: Path) -> None:
    text = section()
    start = text.index("# ~/.dsh/patch.yml")
    patch = tmp_path / "example.yml"
    patch.write_text(text[start:text.index("```", start)])
    proc = run_dsh("--profile", "sdk", "--patch", str(patch), "-h")
    assert proc.returncode == 0, proc.stderr
    dump = json.loads(run_dsh("--profile", "sdk", "--patch", str(patch), "--dump-config",
                              "--json").stdout)
    rows = {r["id"]: r for r in dump["rows"]}
    assert rows["agent"]["config"]["default_route"] == "anthropic"
    assert rows["llm"]["config"]["default_model"] == "deepseek-v4-pro"
    assert rows["llm-vllm"]["config"]["route"] == "vllm"
    assert dump["warnings"] == []
