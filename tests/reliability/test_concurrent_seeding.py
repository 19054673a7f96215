"""Eight launchers seeding the same fresh home at once (``dsh --profile sdk
--dump-config``): all succeed with the same tree, the seeded profile is byte-identical to
the shipped template, and no staging file or folder is left behind (in the profile or
in the layer cache, whose entries the launchers race to write too).

Both seeding paths race: a home with no profile folder (one ``rename`` wins) and a
folder the user made first for the profile's skills (each file is ``link``-ed in, never
replacing one; ``profile.toml`` last).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import Figure, files_under

from dsh.config import shipped
from dsh.config.profiles import Profile

pytestmark = pytest.mark.reliability

LAUNCHERS = 8
ROUNDS = 2



def _stored(entry: bytes) -> object:
    """The parsed value in a layer-cache entry (after its format and code-stamp lines)."""
    _format, _, rest = entry.partition(b"\n")
    _stamp, _, pickled = rest.partition(b"\n")
    _text, value, _checks = pickle.loads(pickled)
    return value

def _seed_at_once(home: Path) -> list[subprocess.CompletedProcess[str]]:
    env = {**os.environ, "DSH_HOME": str(home)}
    procs = [subprocess.Popen([sys.executable, "-m", "dsh", "--profile", "sdk",
                               "--dump-config", "--json"], env=env, text=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(LAUNCHERS)]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.mark.parametrize("folder_first", [False, True], ids=["fresh", "folder-made-first"])
def test_launchers_seed_one_home_at_once(folder_first: bool, tmp_path: Path,
                                         figure: Figure) -> None:
    template = files_under(shipped.template_dir("sdk"))
    for round_ in range(ROUNDS):
        home = tmp_path / f"home-{round_}"
        home.mkdir(mode=0o700)
        mine = {}
        if folder_first:
            skill = home / "profiles" / "sdk" / "skills" / "mine" / "SKILL.md"
            skill.parent.mkdir(parents=True)
            skill.write_text("---\ndescription: the user's own\n---\nbody\n")
            mine = {"skills/mine/SKILL.md": skill.read_bytes()}
        done = _seed_at_once(home)
        assert [d.returncode for d in done] == [0] * LAUNCHERS, [d.stderr for d in done]
        assert len({d.stdout for d in done}) == 1  # one tree, whoever seeded it
        assert all(d.stderr == "" for d in done), [d.stderr for d in done]
        assert sorted(p.name for p in (home / "profiles").iterdir()) == ["sdk"]
        assert files_under(home / "profiles" / "sdk") == {**template, **mine}
        assert sorted(p.name for p in home.iterdir()) == ["cache", "profiles"]
        # The layer cache raced too: only whole entries, no staging file, each readable.
        entries = sorted((home / "cache" / "layers").iterdir())
        assert entries and all(p.suffix == ".pickle" for p in entries), entries
        stored = [_stored(p.read_bytes()) for p in entries]
        assert all(getattr(v, "kind", None) == "bundle" or isinstance(v, Profile)
                   for v in stored), stored
        assert sum(isinstance(v, Profile) for v in stored) == 1  # the profile.toml
    figure("launchers", LAUNCHERS * ROUNDS)
    figure("failed", 0)
    figure("stray files", 0)
