"""The command line's edges as a new user meets them, through the real ``dsh`` process:
launcher options in the wrong place or misspelled, unknown profiles and commands, and
an application's ``-h`` that lists the launcher's options too."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

RunDsh = Callable[..., subprocess.CompletedProcess[str]]
OFFLINE = str(Path(__file__).resolve().parents[2] / "examples" / "offline" / "patch.yml")


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single ``dsh: error:`` line of a usage error (exit 2), without its prefix."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsh: error: "), done.stderr
    return lines[0].removeprefix("dsh: error: ")


def test_a_launcher_option_after_the_task(run_dsh: RunDsh) -> None:
    line = one_error(run_dsh("--profile", "headless", "hi", "--patch", OFFLINE))
    assert line == ("--patch is a launcher option: put it before the application's "
                    f"arguments: dsh --profile headless --patch {OFFLINE} hi")


def test_the_suggested_command_works(run_dsh: RunDsh) -> None:
    line = one_error(run_dsh("--profile", "headless", "Where am I?", "--patch", OFFLINE))
    import shlex

    suggested = shlex.split(line.rsplit(": ", 1)[1])
    assert suggested[0] == "dsh"
    done = run_dsh(*suggested[1:])
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("profile", ["sdk", "acp"])
def test_a_launcher_option_given_to_a_stdio_application(run_dsh: RunDsh, profile: str) -> None:
    line = one_error(run_dsh("--profile", profile, "extra", "--home", "h", "--patch",
                             OFFLINE))
    # the first launcher option among the application's arguments is the one named
    assert line == ("--home is a launcher option: put it before the application's "
                    f"arguments: dsh --profile {profile} --home h --patch {OFFLINE} extra")


def test_the_shorthand_takes_launcher_options_after_the_name(run_dsh: RunDsh) -> None:
    done = run_dsh("web", "--patch", OFFLINE, "-h")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dsh web")


@pytest.mark.parametrize("profile", ["headless", "sdk", "web", "acp"])
def test_an_applications_help_lists_the_launcher_options(run_dsh: RunDsh, profile: str) -> None:
    done = run_dsh("--profile", profile, "-h")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dsh web" if profile == "web"
                                  else f"usage: dsh --profile {profile}")
    assert "launcher options (they come before the application's arguments):" in done.stdout
    assert "--patch FILE" in done.stdout and "--home DIR" in done.stdout


def test_a_misspelled_launcher_option_before_the_profile(run_dsh: RunDsh) -> None:
    line = one_error(run_dsh("--pach", OFFLINE, "--profile", "headless", "hi"))
    assert line == "unknown launcher option --pach; did you mean --patch?"
    line = one_error(run_dsh("--frobnicate"))
    assert line == "unknown launcher option --frobnicate (see `dsh -h`)"


def test_a_misspelled_launcher_option_after_the_profile(run_dsh: RunDsh) -> None:
    line = one_error(run_dsh("--profile", "headless", "--pach", OFFLINE, "hi"))
    assert line == ("--pach: did you mean --patch? It is a launcher option: put it before "
                    f"the application's arguments: dsh --profile headless --patch {OFFLINE} hi")


def test_an_applications_own_bad_option_is_its_own_error(run_dsh: RunDsh) -> None:
    line = one_error(run_dsh("--profile", "headless", "--jsn", "hi"))
    assert line.startswith("unrecognized arguments: --jsn")


def test_an_unknown_profile_lists_them_and_suggests_the_nearest(run_dsh: RunDsh,
                                                               dsh_home: Path) -> None:
    line = one_error(run_dsh("--profile", "hedless", "hi"))
    assert line.startswith(f"unknown profile 'hedless' (no {dsh_home}/profiles/hedless/"
                           "profile.toml). Did you mean 'headless'? Profiles: acp, chat, "
                           "headless, sdk, sdk-minimal, web (hint: ")
    assert list(dsh_home.iterdir()) == []
    line = one_error(run_dsh("zzz-nothing-like-it"))
    assert "Did you mean" not in line and "Profiles: acp, chat, headless, sdk" in line


def test_a_profile_of_the_home_is_listed_and_suggested(run_dsh: RunDsh, dsh_home: Path) -> None:
    made = run_dsh("--profile", "research", "--from-default-profile", "headless",
                   "--dump-config")
    assert made.returncode == 0, made.stderr
    line = one_error(run_dsh("--profile", "reserch", "hi"))
    assert "Did you mean 'research'?" in line
    assert "Profiles: acp, chat, headless, research, sdk, sdk-minimal, web" in line


def test_a_shorthand_that_looks_like_a_command(run_dsh: RunDsh, dsh_home: Path) -> None:
    line = one_error(run_dsh("doctr"))
    assert "unknown profile 'doctr'" in line and "Did you mean the command `dsh doctor`?" in line
    assert list(dsh_home.iterdir()) == []
