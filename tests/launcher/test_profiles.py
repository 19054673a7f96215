"""Tests for :mod:`dsh.config.profiles`, :mod:`dsh.config.bundles` and :mod:`dsh.core.home` on
real files."""

from __future__ import annotations

import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dsh.config import profiles, shipped
from dsh.config.bundles import find_bundle
from dsh.config.profiles import Profile
from dsh.core.errors import ConfigError, ProfileNotFoundError, UsageError
from dsh.core.home import ensure_dir, resolve_home

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# docs/contracts.md, "Profiles": the shipped templates.
SHIPPED = {
    "web": (("dsh-base", "dsh-web-app"), "live"),
    "headless": (("dsh-base", "dsh-headless"), "startup"),
    "sdk": (("dsh-base", "dsh-sdk-app"), "startup"),
    "sdk-minimal": (("dsh-sdk-minimal",), "startup"),
    "acp": (("dsh-base", "dsh-acp-app"), "startup"),
    "chat": (("dsh-base", "dsh-chat-app"), "live"),
}


def mode(path: Path) -> int:
    """The permission bits of ``path``."""
    return stat.S_IMODE(path.stat().st_mode)


def test_shipped_templates_match_the_design() -> None:
    assert shipped.template_names() == sorted(SHIPPED)
    for name, (bundles, policy) in SHIPPED.items():
        data = tomllib.loads((shipped.template_dir(name) / "profile.toml").read_text("utf-8"))
        assert data["profile"]["bundles"] == list(bundles)
        assert data["profile"]["patch-reload"] == policy
        assert data["plugins"]["requirements"] == []
        for bundle in bundles:
            assert (shipped.bundle_dir(bundle) / "patch.yml").is_file()


@pytest.mark.parametrize("name", ["", " ", " x", "x ", ".", "..", "a/b", "/abs", "a\\b",
                                  "a\0b", "-x", "--dump-config"])
def test_invalid_profile_names(name: str) -> None:
    with pytest.raises(UsageError, match="invalid profile name"):
        profiles.validate_name(name)


@pytest.mark.parametrize("name", ["sdk", "my-profile", "p.1", "ünïcode", "a_b"])
def test_valid_profile_names(name: str) -> None:
    assert profiles.validate_name(name) == name


def test_first_use_seeds_a_private_copy(dsh_home: Path) -> None:
    profile = profiles.load_profile(dsh_home, "web")
    assert (profile.name, profile.bundles, profile.patch_reload) == ("web", *SHIPPED["web"])
    folder = dsh_home / "profiles" / "web"
    assert profile.path == folder
    assert (folder / "profile.toml").read_bytes() == (
        shipped.template_dir("web") / "profile.toml").read_bytes()
    assert mode(folder) == 0o700
    assert mode(dsh_home / "profiles") == 0o700
    assert sorted(p.name for p in (dsh_home / "profiles").iterdir()) == ["web"]


def test_seeding_never_overwrites_a_user_edit(dsh_home: Path) -> None:
    folder = dsh_home / "profiles" / "sdk"
    folder.mkdir(parents=True)
    edited = '[profile]\nbundles = ["dsh-sdk-minimal"]\npatch-reload = "live"\n'
    (folder / "profile.toml").write_text(edited, encoding="utf-8")
    assert profiles.seed_template(dsh_home, "sdk") is False
    profile = profiles.load_profile(dsh_home, "sdk")
    assert (profile.bundles, profile.patch_reload) == (("dsh-sdk-minimal",), "live")
    assert (folder / "profile.toml").read_text(encoding="utf-8") == edited


def test_seeding_fills_a_folder_made_before_first_use_keeping_its_files(
        dsh_home: Path) -> None:
    """A user who adds skills or a patch before the first run still gets the profile."""
    folder = dsh_home / "profiles" / "acp"
    (folder / "skills" / "mine").mkdir(parents=True)
    (folder / "skills" / "mine" / "SKILL.md").write_text("---\ndescription: x\n---\n")
    (folder / "patch.yml").write_text("[]\n", encoding="utf-8")
    assert profiles.seed_template(dsh_home, "acp") is True
    assert profiles.seed_template(dsh_home, "acp") is False
    profile = profiles.load_profile(dsh_home, "acp")
    assert (profile.bundles, profile.patch_reload) == SHIPPED["acp"]
    assert sorted(p.name for p in folder.iterdir()) == ["patch.yml", "profile.toml", "skills"]
    assert (folder / "patch.yml").read_text(encoding="utf-8") == "[]\n"
    assert (folder / "skills" / "mine" / "SKILL.md").is_file()


def test_unknown_profile_has_a_hint_and_writes_nothing(dsh_home: Path) -> None:
    with pytest.raises(ProfileNotFoundError) as info:
        profiles.load_profile(dsh_home, "nope")
    message = str(info.value)
    assert message.startswith(f"unknown profile 'nope' (no {dsh_home}/profiles/nope/profile.toml)")
    assert "dsh plugin --profile nope add" in message
    assert "--from-default-profile" in message
    assert info.value.exit_code == 2
    assert list(dsh_home.iterdir()) == []


def test_custom_profile_defaults_to_live(write_profile: Callable[..., Path],
                                         dsh_home: Path) -> None:
    write_profile("mine", bundles=["dsh-base"])
    profile = profiles.load_profile(dsh_home, "mine")
    assert (profile.bundles, profile.patch_reload, profile.requirements) == (
        ("dsh-base",), "live", ())


@pytest.mark.parametrize(("text", "message"), [
    ("[profile\n", "not valid TOML"),
    ('[profile]\npatch-reload = "sometimes"\n',
     "profile.patch-reload must be one of live, startup, got 'sometimes'"),
    ("profile = 3\n", "[profile] must be a table"),
    ('[profile]\nbundles = "dsh-base"\n', "profile.bundles must be a list of non-empty strings"),
    ('[profile]\nbundles = [""]\n', "profile.bundles must be a list of non-empty strings"),
    ("plugins = []\n", "[plugins] must be a table"),
    ("[plugins]\nrequirements = [1]\n",
     "plugins.requirements must be a list of non-empty strings"),
])
def test_bad_profile_toml_names_file_and_field(write_profile: Callable[..., Path],
                                               dsh_home: Path, text: str, message: str) -> None:
    folder = write_profile("bad", bundles=[])
    (folder / "profile.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        profiles.load_profile(dsh_home, "bad")
    assert str(info.value).startswith(f"{folder / 'profile.toml'}: {message}")
    assert info.value.exit_code == 2


def test_create_from_template(dsh_home: Path) -> None:
    profile = profiles.create_from_template(dsh_home, "mine", "headless")
    assert (profile.name, profile.bundles, profile.patch_reload) == (
        "mine", *SHIPPED["headless"])
    assert mode(dsh_home / "profiles" / "mine") == 0o700
    with pytest.raises(UsageError, match="profile 'mine' already exists"):
        profiles.create_from_template(dsh_home, "mine", "web")
    with pytest.raises(UsageError, match="profile 'sdk' already exists"):
        profiles.create_from_template(dsh_home, "sdk", "web")
    with pytest.raises(UsageError,
                       match=r"unknown template 'nope' \(shipped: acp, chat, headless, "):
        profiles.create_from_template(dsh_home, "other", "nope")
    with pytest.raises(UsageError, match="invalid profile name"):
        profiles.create_from_template(dsh_home, "..", "web")
    assert sorted(p.name for p in (dsh_home / "profiles").iterdir()) == ["mine"]


def test_list_profiles_reads_without_seeding(write_profile: Callable[..., Path],
                                             dsh_home: Path) -> None:
    write_profile("mine", bundles=["dsh-base"], patch_reload="startup")
    broken = write_profile("broken", bundles=[])
    (broken / "profile.toml").write_text("nope nope\n", encoding="utf-8")
    (dsh_home / "profiles" / ".staging").mkdir()
    listed = profiles.list_profiles(dsh_home)
    names = [item.name if isinstance(item, Profile) else item[0] for item in listed]
    assert names == ["acp", "broken", "chat", "headless", "mine", "sdk", "sdk-minimal", "web"]
    errors = [item for item in listed if not isinstance(item, Profile)]
    assert [(name, type(error)) for name, error in errors] == [("broken", ConfigError)]
    assert sorted(p.name for p in (dsh_home / "profiles").iterdir()) == [
        ".staging", "broken", "mine"]


def test_shipped_bundles_resolve_first(write_profile: Callable[..., Path]) -> None:
    assert find_bundle("dsh-base") == shipped.bundle_dir("dsh-base") / "patch.yml"


def test_missing_bundle_names_the_profile_file(write_profile: Callable[..., Path]) -> None:
    folder = write_profile("mine", bundles=["dsh-base", "no-such-bundle"])
    with pytest.raises(ConfigError) as info:
        find_bundle("no-such-bundle", plugin_dir=folder / "plugins",
                    profile_file=folder / "profile.toml")
    assert str(info.value) == (
        f"{folder / 'profile.toml'}: profile.bundles: bundle 'no-such-bundle' not found "
        "(not shipped, no dsh.bundles entry point installed)")


def install_bundle(plugin_dir: Path, name: str, package: str, patch: str | None) -> None:
    """Install a third-party bundle distribution into a profile's plugin environment."""
    dist_info = plugin_dir / f"{package}-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n",
                                        encoding="utf-8")
    (dist_info / "entry_points.txt").write_text(f"[dsh.bundles]\n{name} = {package}\n",
                                                encoding="utf-8")
    (plugin_dir / package).mkdir()
    (plugin_dir / package / "__init__.py").write_text("", encoding="utf-8")
    if patch is not None:
        (plugin_dir / package / "patch.yml").write_text(patch, encoding="utf-8")


def test_third_party_bundle_from_the_profile_plugin_environment(
        write_profile: Callable[..., Path]) -> None:
    folder = write_profile("mine", bundles=["dsh-base", "acme-bundle"])
    install_bundle(folder / "plugins", "acme-bundle", "acme_bundle_pkg", "[]\n")
    found = find_bundle("acme-bundle", plugin_dir=folder / "plugins")
    assert found == folder / "plugins" / "acme_bundle_pkg" / "patch.yml"


def test_third_party_bundle_without_patch_file(write_profile: Callable[..., Path]) -> None:
    folder = write_profile("mine", bundles=["acme-bundle"])
    install_bundle(folder / "plugins", "acme-bundle", "acme_empty_pkg", None)
    with pytest.raises(ConfigError, match=r"bundle 'acme-bundle': entry point names "
                                          r"'acme_empty_pkg', which has no patch\.yml"):
        find_bundle("acme-bundle", plugin_dir=folder / "plugins")


def test_home_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"DSH_HOME": str(tmp_path / "env-home")}
    assert resolve_home("explicit", environ) == tmp_path / "explicit"
    assert resolve_home(None, environ) == tmp_path / "env-home"
    assert resolve_home(None, {"DSH_HOME": "rel"}) == tmp_path / "rel"
    assert resolve_home(None, {"DSH_HOME": "  "}) == Path.home() / ".dsh"
    assert resolve_home(None, {}) == Path.home() / ".dsh"
    assert resolve_home("  ", environ) == tmp_path / "env-home"
    assert resolve_home("~/x", {}) == Path.home() / "x"


def test_ensure_dir_is_private_and_refuses_files(tmp_path: Path) -> None:
    home = ensure_dir(tmp_path / "new-home")
    assert mode(home) == 0o700
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        ensure_dir(blocker)
    with pytest.raises(ConfigError, match=r"home: cannot create directory \(Not a directory\)"):
        ensure_dir(blocker / "home")
