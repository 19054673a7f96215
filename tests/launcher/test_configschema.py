"""``dsh --dump-config-schema``: a valid JSON Schema that agrees with the patch parser.

The shipped bundles (and the offline example, when present) must validate, and a set of
patches must be accepted or rejected alike by the schema and by :mod:`dsh.config.patchfile`, so
the schema editors use cannot drift from what the launcher really accepts.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from dsh.config import shipped
from dsh.config.configschema import config_schema
from dsh.config.patchfile import parse_layer
from dsh.core.errors import PatchError

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
REPO = Path(__file__).resolve().parents[2]


class _TagLoader(yaml.SafeLoader):
    """Loads ``!env``/``!home``/``!path`` as their dump form (``{"!env": NAME}``)."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.SequenceNode):
        return {f"!{suffix}": loader.construct_sequence(node)}
    return {f"!{suffix}": loader.construct_scalar(node)}  # type: ignore[arg-type]


_TagLoader.add_multi_constructor("!", _tag)


def validator() -> jsonschema.protocols.Validator:
    """A draft 2020-12 validator of the shipped schema (checked as a schema first)."""
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_cli_prints_the_schema(run_dsh: RunDsh) -> None:
    proc = run_dsh("--dump-config-schema")
    assert (proc.returncode, proc.stderr) == (0, "")
    schema = json.loads(proc.stdout)
    assert schema == config_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert run_dsh("--dump-config-schema", "--json").stdout == proc.stdout


def patch_files() -> list[Path]:
    """Every shipped bundle's patch file and the repository's example patches."""
    files = sorted((shipped.shipped_root() / "bundles").glob("*/patch.yml"))
    files += sorted((REPO / "examples").glob("**/patch.yml"))
    return files


@pytest.mark.parametrize("path", patch_files(), ids=lambda p: p.parent.name)
def test_shipped_patch_files_validate(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    parse_layer(text, path=path, kind="bundle", source=path.parent.name)
    validator().validate(yaml.load(text, Loader=_TagLoader) or [])


ACCEPTED = [
    "- insert: [{id: a, name: p, config: {k: !env K}}]\n",
    "- insert: [{id: g, group: true, config: [{id: c, name: p, inject: [s]}]}]\n",
    "- {id: a, name: p, config: {k: 1}, disabled: false}\n",
    "- {id: 'g:c', disabled: true}\n",
    "- {id: a, merge: {config: {k: {deep: 1}}}}\n",
    "- {id: g, config: [{id: c, name: p}]}\n",
    "- {id: g, insert: [{id: c, name: p}]}\n",
    "- {id: a, config: {k: !env [K, d], h: !home x, p: !path y}}\n",
]
REJECTED = [
    "a: 1\n",
    "- 3\n",
    "- insert: {id: a, name: p}\n",
    "- {id: a, colour: red}\n",
    "- {}\n",
    "- insert: [{id: a}]\n",
    "- insert: [{name: p}]\n",
    "- insert: [{id: 'a:b', name: p}]\n",
    "- insert: [{id: a, name: p, colour: red}]\n",
    "- {id: a, disabled: maybe}\n",
    "- {id: a, inject: s}\n",
    "- {id: a, merge: {config: 3}}\n",
    "- insert: [{id: g, group: true, config: {a: 1}}]\n",
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_schema_and_parser_accept_alike(text: str) -> None:
    parse_layer(text, path=None, kind="patch", source="p.yml")
    validator().validate(yaml.load(text, Loader=_TagLoader))


@pytest.mark.parametrize("text", REJECTED)
def test_schema_and_parser_reject_alike(text: str) -> None:
    with pytest.raises(PatchError):
        parse_layer(text, path=None, kind="patch", source="p.yml")
    assert not validator().is_valid(yaml.load(text, Loader=_TagLoader))
