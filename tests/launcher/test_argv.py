"""Tests for :mod:`dsh.cli.argv`: launcher flags versus the application's arguments."""

from __future__ import annotations

import pytest

from dsh.cli.argv import Invocation, misplaced, near_flag, parse
from dsh.core.errors import UsageError


def fields(inv: Invocation) -> dict[str, object]:
    return {name: getattr(inv, name) for name in Invocation.__slots__}


def test_shorthand_equals_profile_flag() -> None:
    assert fields(parse(["web"])) == fields(parse(["--profile", "web"])) == fields(
        Invocation(profile="web"))
    assert fields(parse(["headless", "do the task"])) == fields(
        parse(["--profile", "headless", "do the task"]))
    assert parse(["headless", "do the task"]).app_args == ["do the task"]


def test_profile_inline_value() -> None:
    assert fields(parse(["--profile=sdk"])) == fields(parse(["--profile", "sdk"]))


def test_subcommands_are_not_profiles() -> None:
    inv = parse(["info", "--json"])
    assert (inv.subcommand, inv.profile, inv.app_args) == ("info", None, ["--json"])
    inv = parse(["--home", "h", "doctor", "--strict"])
    assert (inv.subcommand, inv.home, inv.app_args) == ("doctor", "h", ["--strict"])
    assert parse(["profile", "list"]).subcommand == "profile"


def test_subcommand_name_after_a_profile_is_an_app_argument() -> None:
    inv = parse(["--profile", "sdk", "info"])
    assert (inv.profile, inv.subcommand, inv.app_args) == ("sdk", None, ["info"])


def test_json_without_dump_flag_belongs_to_the_app() -> None:
    inv = parse(["--profile", "headless", "--json", "task"])
    assert inv.json is False
    assert inv.app_args == ["--json", "task"]
    assert fields(parse(["headless", "--json", "task"])) == fields(inv)


@pytest.mark.parametrize("argv", [
    ["--profile", "sdk", "--dump-config", "--json"],
    ["--profile", "sdk", "--json", "--dump-config"],
    ["--json", "--dump-config", "--profile", "sdk"],
    ["sdk", "--dump-config", "--json"],
])
def test_json_beside_a_dump_flag_is_the_launchers(argv: list[str]) -> None:
    inv = parse(argv)
    assert (inv.profile, inv.dump, inv.json, inv.app_args) == ("sdk", "--dump-config", True, [])


def test_json_alone_without_profile_is_not_taken_by_the_launcher() -> None:
    inv = parse(["--json"])
    assert inv.json is False
    assert inv.app_args == ["--json"]


def test_patches_keep_argv_order_and_home_is_kept() -> None:
    inv = parse(["--home", "H", "--patch", "b.yml", "--profile", "sdk", "--patch=a.yml",
                 "--patch", "c.yml"])
    assert inv.patches == ["b.yml", "a.yml", "c.yml"]
    assert inv.home == "H"
    assert inv.profile == "sdk"


def test_first_unknown_token_starts_the_app_arguments_verbatim() -> None:
    inv = parse(["--profile", "sdk", "--model", "x", "--patch", "p.yml", "-h"])
    assert inv.patches == []
    assert inv.help is False
    assert inv.app_args == ["--model", "x", "--patch", "p.yml", "-h"]


def test_launcher_flags_after_the_shorthand_name_are_still_launcher_flags() -> None:
    inv = parse(["web", "--patch", "p.yml", "serve"])
    assert (inv.profile, inv.patches, inv.app_args) == ("web", ["p.yml"], ["serve"])


def test_a_second_positional_is_an_app_argument() -> None:
    assert parse(["web", "headless"]).app_args == ["headless"]


def test_double_dash_passes_the_rest() -> None:
    inv = parse(["--profile", "sdk", "--", "--dump-config", "--json"])
    assert (inv.dump, inv.json, inv.app_args) == (None, False, ["--dump-config", "--json"])


def test_version_and_help_only_before_a_profile() -> None:
    assert parse(["-V"]).version and parse(["--version"]).version
    assert parse(["-h"]).help and parse(["--help"]).help
    inv = parse(["--profile", "sdk", "-h"])
    assert (inv.help, inv.app_args) == (False, ["-h"])
    inv = parse(["sdk", "--version"])
    assert (inv.version, inv.app_args) == (False, ["--version"])


def test_from_default_profile_and_dump_flags() -> None:
    inv = parse(["--profile", "mine", "--from-default-profile", "web", "--dump-default-config"])
    assert (inv.profile, inv.from_template, inv.dump) == ("mine", "web", "--dump-default-config")
    assert parse(["--dump-config-schema"]).dump == "--dump-config-schema"
    assert parse(["--dump-config", "--dump-config", "sdk"]).dump == "--dump-config"


@pytest.mark.parametrize(("argv", "message"), [
    (["--profile"], "--profile needs a value"),
    (["--profile", ""], "--profile needs a non-empty value"),
    (["--profile="], "--profile needs a non-empty value"),
    (["--patch"], "--patch needs a value"),
    (["--home="], "--home needs a non-empty value"),
    (["--profile", "a", "--profile", "b"], "--profile given twice"),
    (["--profile", "a", "--dump-config", "--dump-default-config"],
     "--dump-config and --dump-default-config cannot be combined"),
])
def test_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse(argv)
    assert str(info.value) == message
    assert info.value.exit_code == 2


# -- where misplaced launcher options go (misplaced, near_flag) ----------------------------


def test_a_launcher_option_after_the_task_is_moved_in_front() -> None:
    inv = parse(["--profile", "headless", "hi", "--patch", "F"])
    assert misplaced(inv, "unrecognized arguments: --patch F") == (
        "--patch is a launcher option: put it before the application's arguments: "
        "dsh --profile headless --patch F hi")


def test_the_suggested_command_keeps_the_launcher_options_already_given() -> None:
    inv = parse(["--home", "/h", "web", "--patch=a.yml", "--port", "0", "--home", "x y",
                 "--patch=b.yml", "--dump-config"])
    assert misplaced(inv, "whatever") == (
        "--home is a launcher option: put it before the application's arguments: "
        "dsh --home /h --profile web --patch a.yml --home 'x y' --patch=b.yml "
        "--dump-config --port 0")


def test_a_misspelled_launcher_option_the_application_refused() -> None:
    inv = parse(["--profile", "headless", "--pach", "F", "hi"])
    assert misplaced(inv, "unrecognized arguments: --pach") == (
        "--pach: did you mean --patch? It is a launcher option: put it before the "
        "application's arguments: dsh --profile headless --patch F hi")


def test_options_of_the_application_are_left_alone() -> None:
    # --jsn is close to --json, which the application (not the launcher) takes here
    assert misplaced(parse(["headless", "--jsn", "hi"]), "unrecognized arguments: --jsn") is None
    assert misplaced(parse(["sdk", "foo"]), "takes no arguments (got 'foo')") is None
    # a near miss the application did not complain about is not guessed at
    assert misplaced(parse(["web", "--pach", "F"]), "--port must be a number") is None


@pytest.mark.parametrize(("token", "near"), [
    ("--pach", "--patch"), ("--profle", "--profile"), ("--hom", "--home"),
    ("--dump-confg", "--dump-config"), ("--patch", None), ("--xyz", None), ("-p", None),
    ("--pach=F", "--patch"),
])
def test_near_flag(token: str, near: str | None) -> None:
    assert near_flag(token) == near
