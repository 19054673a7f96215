"""Patch YAML aliases: reuse is fine, a "billion laughs" file is refused with one line.

A patch layer is plain data, so aliases are copied when a file is read; a few lines of
aliases can ask for billions of values. The reader counts the nodes every alias adds and
refuses a file whose aliases add more than ``MAX_ALIAS_NODES``, naming the whole count,
having copied no more than that. The real ``dsh`` is run under a 1 GiB address-space
limit, so a regression fails (out of memory, or the subprocess bound) instead of taking
the machine down.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from dsh.config.patchfile import parse_layer
from dsh.config.yamlreader import MAX_ALIAS_NODES
from dsh.core.errors import PatchError


def laughs(levels: int, width: int = 9) -> str:
    """A patch merging a "billion laughs" into the agent row's config: each level a list
    of ``width`` aliases of the level below, ``width ** levels`` strings in all."""
    lines = ["- id: agent", "  merge:", "    config:",
             f"      l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels + 1):
        lines.append(f"      l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


BOMB = laughs(9)  # 9 ** 10: about 3.5 billion strings from twelve lines


def parse(text: str) -> object:
    return parse_layer(text, path=None, kind="patch", source="bomb.yml")


def test_the_bomb_is_refused_with_its_whole_count() -> None:
    with pytest.raises(PatchError) as caught:
        parse(BOMB)
    message = str(caught.value)
    # level 0 is a list of 9 strings (10 nodes), level L a list of 9 aliases of level L-1:
    # each of those 9 aliases adds level L-1's nodes as written out
    sizes = [10]
    for _ in range(9):
        sizes.append(1 + 9 * sizes[-1])
    whole = sum(9 * size for size in sizes[:-1])
    assert message == (f"bomb.yml: YAML aliases would expand this file by {whole} nodes, "
                       f"over the limit of {MAX_ALIAS_NODES} (write the values out, or use "
                       "fewer aliases)")


def test_aliases_within_the_budget_read_as_if_written_out() -> None:
    reused = textwrap.dedent("""\
        - id: agent
          merge:
            config:
              base: &base {retries: 3, limits: {tokens: 4096}}
              routes: [*base, *base, *base]
        """)
    written = textwrap.dedent("""\
        - id: agent
          merge:
            config:
              base: {retries: 3, limits: {tokens: 4096}}
              routes: [{retries: 3, limits: {tokens: 4096}}, {retries: 3, limits: {tokens: 4096}},
                       {retries: 3, limits: {tokens: 4096}}]
        """)
    assert parse(reused).operations[0].merge == parse(written).operations[0].merge


@pytest.mark.parametrize(("aliases", "refused"), [(100, False), (101, True)])
def test_the_budget_counts_the_nodes_aliases_add(aliases: int, refused: bool) -> None:
    """Each alias of a 1000-node list adds 1000 nodes: 100 of them fill the budget."""
    assert MAX_ALIAS_NODES == 100_000
    text = (laughs(0, width=999)
            + f"      more: [{', '.join(['*l0'] * aliases)}]\n")
    if refused:
        with pytest.raises(PatchError, match=f"expand this file by {aliases * 1000} nodes"):
            parse(text)
    else:
        more = parse(text).operations[0].merge["config"]["more"]
        assert len(more) == aliases and all(len(item) == 999 for item in more)


def _limited(gib: int) -> Callable[[], None]:
    def limit() -> None:
        import resource

        cap = gib * 1024 ** 3
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return limit


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_AS")
def test_dsh_refuses_a_bomb_patch_with_one_line_and_exit_2(
        run_dsh: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path,
        dsh_home: Path) -> None:
    bomb = tmp_path / "bomb.yml"
    bomb.write_text(BOMB)
    done = subprocess.run(
        [sys.executable, "-m", "dsh", "--profile", "sdk", "--dump-config", "--patch",
         str(bomb)], capture_output=True, text=True, timeout=60, preexec_fn=_limited(1),
        stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bomb) in lines[0], done.stderr
    assert "YAML aliases would expand this file by" in lines[0]
    # the same bomb as the home layer stops a runtime before it starts
    (dsh_home / "patch.yml").write_text(BOMB)
    done = run_dsh("--profile", "sdk", "--dump-config", "--json")
    assert done.returncode == 2
    assert f"{dsh_home / 'patch.yml'}: YAML aliases would expand" in done.stderr
