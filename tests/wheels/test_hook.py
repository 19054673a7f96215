"""The build hook's decisions, as pure functions: platform, tag, source state, payload."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dsh._version import __version__

from .conftest import REPO, WHEELS

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PLATFORM_KEYS = {"linux-x64", "linux-arm64", "macos-arm64", "win-x64"}


def profile_files() -> set[str]:
    return {q.relative_to(REPO / "profiles").as_posix()
            for q in (REPO / "profiles").rglob("*") if q.is_file()}


def frozen_tree(executable: str = "dsh-runtime-linux-x64") -> set[str]:
    return {executable, "_internal/dsh/__init__.pyc", "_internal/dsh/runtime/__init__.pyc",
            "_internal/libpython3.12.so.1.0",
            *(f"_internal/dsh/_profiles/{p}" for p in profile_files())}


def expected(hook: ModuleType, frozen: set[str]) -> set[str]:
    return hook.expected_payload(
        executable="dsh-runtime-linux-x64", companions=["dsh-runtime-linux-x64-rg"],
        frozen=frozen, profiles=profile_files(), package={"__init__.py", "_payload.py"})


class TestPlatforms:
    def test_the_four_targets(self, hook: ModuleType) -> None:
        version, platforms = hook.load_platforms(WHEELS / "platforms.json")
        assert version == "14.1.0"
        assert set(platforms) == PLATFORM_KEYS
        for key, entry in platforms.items():
            assert hook.wheel_tag(entry["build_tag"]).startswith("py3-none-")
            assert entry["ripgrep_wheel"].startswith(f"ripgrep-{version}-py3-none-")
            assert len(entry["ripgrep_sha256"]) == 64
            if key.startswith("linux-"):
                # Linux builds are tagged linux_* until auditwheel earns the real tag.
                assert entry["build_tag"].startswith("linux_")
                assert entry["wheel_tag"].startswith("manylinux_")
            else:
                assert entry["build_tag"] == entry["wheel_tag"]

    def test_unknown_key_fails_naming_the_known_ones(self, hook: ModuleType) -> None:
        _, platforms = hook.load_platforms(WHEELS / "platforms.json")
        with pytest.raises(hook.BuildError, match=r"'linux-riscv64'.*linux-arm64, linux-x64"):
            hook.select_platform(platforms, "linux-riscv64")

    def test_entry_missing_a_field_fails(self, hook: ModuleType, tmp_path: Path) -> None:
        path = tmp_path / "platforms.json"
        path.write_text(json.dumps({"ripgrep": "14.1.0", "platforms": {
            "linux-x64": {"wheel_tag": "manylinux_2_28_x86_64"}}}))
        with pytest.raises(hook.BuildError, match="'linux-x64' lacks build_tag, ripgrep_sha256"):
            hook.load_platforms(path)


class TestWheelTag:
    def test_platform_tag(self, hook: ModuleType) -> None:
        assert hook.wheel_tag("win_amd64") == "py3-none-win_amd64"

    @pytest.mark.parametrize("tag", ["any", "", "any.linux_x86_64", "none-any"])
    def test_would_be_none_any_is_refused(self, hook: ModuleType, tag: str) -> None:
        with pytest.raises(hook.BuildError, match="must name its platform"):
            hook.wheel_tag(tag)


class TestPayload:
    def test_exact_set_passes(self, hook: ModuleType) -> None:
        frozen = frozen_tree()
        wanted = expected(hook, frozen)
        assert {"runtime.json", "VERSION", "dsh-runtime-linux-x64-rg", "__init__.py"} <= wanted
        hook.check_payload(set(wanted), wanted)

    def test_missing_file_fails_naming_it(self, hook: ModuleType) -> None:
        wanted = expected(hook, frozen_tree())
        with pytest.raises(hook.BuildError, match="missing dsh-runtime-linux-x64-rg"):
            hook.check_payload(wanted - {"dsh-runtime-linux-x64-rg"}, wanted)

    def test_extra_file_fails_naming_it(self, hook: ModuleType) -> None:
        wanted = expected(hook, frozen_tree())
        with pytest.raises(hook.BuildError, match=r"unexpected dsh-runtime-linux-arm64$"):
            hook.check_payload(wanted | {"dsh-runtime-linux-arm64"}, wanted)

    def test_frozen_tree_without_profiles_fails(self, hook: ModuleType) -> None:
        frozen = {p for p in frozen_tree() if "_profiles" not in p}
        with pytest.raises(hook.BuildError, match="lacks _internal/dsh/_profiles/"):
            expected(hook, frozen)

    @pytest.mark.parametrize("intruder", [
        "_internal/tcl8/init.tcl", "_internal/python3.12/lib-dynload/_tkinter.so",
        "_internal/yaml/__pycache__/x.pyc", "_internal/unittest/x.txt",
        "_internal/pydoc.pyc", "_internal/PIL/PdfImagePlugin.pyc", "_internal/pip/__init__.pyc",
        "_internal/filelock/_core/_lock.pyc", "_internal/python3.12/lib-dynload/_lzma.so",
        "_internal/PIL/_imagingft.cpython-312-x86_64-linux-gnu.so", "_internal/_bz2.pyd",
        "_internal/python3.12/lib-dynload/pyexpat.cpython-312-x86_64-linux-gnu.so",
        "_internal/xml/etree/ElementTree.pyc", "_internal/libuuid.so.1",
        "_internal/libexpat.so.1", "_internal/tarfile.pyc",
        "_internal/uvicorn/protocols/http/httptools_impl.pyc",
        "_internal/anyio/_backends/_trio.pyc", "_internal/encodings/bz2_codec.pyc"])
    def test_excluded_modules_fail(self, hook: ModuleType, intruder: str) -> None:
        with pytest.raises(hook.BuildError, match="excluded modules"):
            expected(hook, frozen_tree() | {intruder})

    @pytest.mark.parametrize("key", sorted(PLATFORM_KEYS))
    def test_every_excluded_module_is_refused(self, hook: ModuleType, key: str) -> None:
        """The payload check knows each module the freeze leaves out, as compiled code
        and, for a top-level name, as a standard-library extension."""
        for module in hook.excluded_modules(key):
            intruders = [f"_internal/{module.replace('.', '/')}.pyc",
                         f"_internal/{module.replace('.', '/')}/__init__.pyc"]
            if "." not in module:
                intruders.append(f"_internal/python3.12/lib-dynload/{module}.cpython-312.so")
            for intruder in intruders:
                with pytest.raises(hook.BuildError, match="excluded modules"):
                    hook.expected_payload(
                        executable="dsh-runtime-linux-x64", companions=[],
                        frozen=frozen_tree() | {intruder}, profiles=profile_files(),
                        package=set(), excluded=hook.excluded_modules(key))

    def test_windows_only_modules_stay_in_the_windows_freeze(self, hook: ModuleType) -> None:
        windows = set(hook.excluded_modules("win-x64"))
        assert windows == set(hook.EXCLUDED_MODULES)
        for key in PLATFORM_KEYS - {"win-x64"}:
            assert set(hook.excluded_modules(key)) == windows | set(hook.WINDOWS_ONLY_MODULES)
        kept = "_internal/asyncio/windows_events.pyc"
        assert kept in hook.expected_payload(
            executable="dsh-runtime-linux-x64", companions=[], frozen=frozen_tree() | {kept},
            profiles=profile_files(), package=set(), excluded=hook.excluded_modules("win-x64"))

    def test_kept_modules_pass(self, hook: ModuleType) -> None:
        kept = {"_internal/PIL/PngImagePlugin.pyc", "_internal/PIL/__init__.pyc",
                "_internal/pydoc_helpers.pyc", "_internal/PIL/_imaging.cpython-312-darwin.so",
                "_internal/python3.12/lib-dynload/_ssl.so", "_internal/liblzma.so.5",
                "_internal/uuid.pyc", "_internal/xmlish.pyc", "_internal/gzip.pyc",
                "_internal/uvicorn/protocols/http/h11_impl.pyc",
                "_internal/python3.12/lib-dynload/_decimal.cpython-312.so"}
        assert kept <= expected(hook, frozen_tree() | kept)

    def test_package_sources_skip_bytecode(self, hook: ModuleType, tmp_path: Path) -> None:
        (tmp_path / "__pycache__").mkdir()
        (tmp_path / "__pycache__/_payload.cpython-311.pyc").write_bytes(b"")
        (tmp_path / "__init__.py").write_text("")
        assert hook.package_sources(tmp_path) == {"__init__.py"}


class TestSource:
    def test_clean_checkout(self, hook: ModuleType) -> None:
        assert hook.check_source("", "a" * 40, env_commit=None, allow_dirty=False) == {
            "commit": "a" * 40, "dirty": False}

    def test_dirty_tree_is_refused_naming_files(self, hook: ModuleType) -> None:
        with pytest.raises(hook.BuildError, match=r"dirty tree .*runtime/x\.py"):
            hook.check_source(" M runtime/x.py\n", "a" * 40, env_commit=None,
                              allow_dirty=False)

    def test_dirty_tree_allowed_is_marked(self, hook: ModuleType) -> None:
        state = hook.check_source("?? wheels/y.py\n", "b" * 40, env_commit=None,
                                  allow_dirty=True)
        assert state == {"commit": "b" * 40, "dirty": True}

    def test_no_git_and_no_commit_is_unversioned(self, hook: ModuleType) -> None:
        with pytest.raises(hook.BuildError, match="unversioned source"):
            hook.check_source(None, None, env_commit=None, allow_dirty=True)

    def test_no_git_with_commit_from_ci(self, hook: ModuleType) -> None:
        assert hook.check_source(None, None, env_commit="c" * 40, allow_dirty=False) == {
            "commit": "c" * 40, "dirty": False}

    def test_git_state_of_a_real_repository(self, hook: ModuleType, tmp_path: Path) -> None:
        def git(*args: str) -> None:
            subprocess.run(["git", "-C", str(tmp_path), *args], check=True,
                           capture_output=True)

        git("init", "-q")
        (tmp_path / "src").mkdir()
        (tmp_path / "src/a.py").write_text("x = 1\n")
        (tmp_path / "notes.txt").write_text("not a runtime source\n")
        git("add", "src/a.py")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
        status, commit = hook.git_state(tmp_path)
        assert status == "" and commit is not None and len(commit) == 40
        (tmp_path / "src/a.py").write_text("x = 2\n")
        status, _ = hook.git_state(tmp_path)
        assert status == " M src/a.py\n"

    def test_git_state_outside_a_repository(self, hook: ModuleType, tmp_path: Path) -> None:
        assert hook.git_state(tmp_path / "nowhere") == (None, None)


class TestFreezeInputs:
    def test_hidden_imports_come_from_the_builtin_table(self, hook: ModuleType) -> None:
        from dsh.runtime.kernel.builtin_plugins import BUILTIN_PLUGINS

        modules = hook.builtin_plugin_modules(
            REPO / "src/dsh/runtime/kernel/builtin_plugins.py")
        assert modules == sorted({ref.partition(":")[0] for ref in BUILTIN_PLUGINS.values()})
        for module in modules:
            assert importlib.util.find_spec(module) is not None, module

    def test_table_must_be_a_literal(self, hook: ModuleType, tmp_path: Path) -> None:
        table = tmp_path / "builtin_plugins.py"
        table.write_text("BUILTIN_PLUGINS = dict(a='m:C')\n")
        with pytest.raises(hook.BuildError, match="no annotated BUILTIN_PLUGINS literal"):
            hook.builtin_plugin_modules(table)

    def test_requirements_are_the_python_runtimes_dependencies(self, hook: ModuleType) -> None:
        project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
        assert hook.runtime_requirements(REPO / "pyproject.toml") == [
            *project["dependencies"], *project["optional-dependencies"]["python"]]

    def test_pyinstaller_argv(self, hook: ModuleType, tmp_path: Path) -> None:
        argv = hook.pyinstaller_argv(name="dsh-runtime-linux-x64", entry=WHEELS / "e.py",
                                     repo=REPO, work=tmp_path, hidden=["a.b", "c"],
                                     excluded=hook.excluded_modules("linux-x64"), strip=True)
        pairs = list(itertools.pairwise(argv))
        assert ("--hidden-import", "a.b") in pairs and ("--hidden-import", "c") in pairs
        assert ("--exclude-module", "tkinter") in pairs
        assert ("--exclude-module", "unittest") in pairs
        assert any(a == "--add-data" and b.endswith("dsh/_profiles") for a, b in pairs)
        assert "--onedir" in argv and "--strip" in argv and argv[-1].endswith("e.py")
        assert ("--exclude-module", "filelock") in pairs and ("--optimize", "2") in pairs
        assert ("--exclude-module", "psycopg") in pairs  # sessions-postgres: python carrier
        assert ("--exclude-module", "dsh.runtime.sessions.postgres.store") in pairs
        assert ("--exclude-module", "opentelemetry") in pairs  # telemetry: python carrier
        assert ("--exclude-module", "dsh.runtime.telemetry.exporting") in pairs
        assert ("--exclude-module", "dsh.runtime.telemetry.plugin") not in pairs
        assert ("--exclude-module", "xml") in pairs
        assert ("--exclude-module", "asyncio.windows_events") in pairs
        assert "--strip" not in hook.pyinstaller_argv(
            name="x", entry=WHEELS / "e.py", repo=REPO, work=tmp_path, hidden=[], excluded=[],
            strip=False)

    def test_import_audit_argv(self, hook: ModuleType, tmp_path: Path) -> None:
        argv = hook.import_audit_argv(tmp_path / "python", tmp_path / "_internal", REPO,
                                      ["xml", "tarfile"])
        assert argv[:4] == [str(tmp_path / "python"), str(WHEELS / "import_audit.py"),
                            "--support", str(tmp_path / "_internal")]
        pairs = list(itertools.pairwise(argv))
        assert [b for a, b in pairs if a == "--exclude"] == ["xml", "tarfile"]
        assert [b for a, b in pairs if a == "--path"] == [
            str(REPO / "src"), str(REPO / "wheels")]

    def test_pillow_source_build_holds_only_read_images_codecs(self, hook: ModuleType,
                                                               tmp_path: Path) -> None:
        argv = hook.pillow_source_argv(tmp_path / "python", "13.0.0")
        assert argv[:3] == [str(tmp_path / "python"), "-m", "pip"]
        assert "pillow==13.0.0" in argv and ("--no-binary", "pillow") in itertools.pairwise(argv)
        settings = {b for a, b in itertools.pairwise(argv) if a == "-C"}
        assert {"jpeg=enable", "zlib=enable", "webp=enable"} <= settings
        assert {"tiff=disable", "jpeg2000=disable", "xcb=disable"} <= settings

    @pytest.mark.parametrize(("relative", "runpath"), [
        ("libpython3.12.so.1.0", "$ORIGIN"),
        ("yaml/_yaml.so", "$ORIGIN/.."),
        ("python3.12/lib-dynload/_ssl.so", "$ORIGIN/../.."),
    ])
    def test_runpath_points_at_the_support_folder(self, hook: ModuleType, relative: str,
                                                  runpath: str) -> None:
        assert hook.runpath(relative) == runpath

    def test_ripgrep_member(self, hook: ModuleType) -> None:
        assert hook.ripgrep_member("14.1.0", "ripgrep-14.1.0-py3-none-win_amd64.whl") == (
            "ripgrep-14.1.0.data/scripts/rg.exe")
        assert hook.ripgrep_member(
            "14.1.0", "ripgrep-14.1.0-py3-none-macosx_11_0_arm64.whl") == (
            "ripgrep-14.1.0.data/scripts/rg")


class TestProjectFiles:
    def test_runtime_wheel_metadata(self) -> None:
        config = tomllib.loads((WHEELS / "pyproject.toml").read_text())
        assert config["project"]["name"] == "dsh-runtime-bin"
        assert "scripts" not in config["project"] and "gui-scripts" not in config["project"]
        assert (WHEELS / config["tool"]["hatch"]["version"]["path"]).resolve() == (
            REPO / "src/dsh/_version.py")

    def test_dsh_runtime_extra_pins_this_version(self) -> None:
        extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
            "optional-dependencies"]
        assert extras["runtime"] == [f"dsh-runtime-bin=={__version__}"]

    def test_cibuildwheel_builds_once_and_smoke_tests(self) -> None:
        config = tomllib.loads((WHEELS / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
        assert config["build"] == "cp312-*"
        assert "scripts/smoke_runtime_wheel.py --wheel {wheel}" in config["test-command"]
        # One audit-and-retag command for every platform; none turns it off (an empty
        # command would let a platform ship the tag it was built with, unearned).
        assert "earn_tag.py --check-platforms" in config["repair-wheel-command"]
        for platform in ("linux", "macos", "windows"):
            assert "repair-wheel-command" not in config.get(platform, {})
        assert "delocate" in config["macos"]["before-build"]
        assert "delvewheel" in config["windows"]["before-build"]


class TestMaterializeLinks:
    """Links in the frozen tree become the files they name, packed once."""

    def test_a_link_becomes_its_target_moved(self, hook: ModuleType, tmp_path: Path) -> None:
        (tmp_path / "pillow.libs").mkdir()
        (tmp_path / "pillow.libs" / "libwebp.so").write_bytes(b"\x7fELF webp")
        (tmp_path / "libwebp.so").symlink_to("pillow.libs/libwebp.so")
        hook.materialize_links(tmp_path)
        assert not (tmp_path / "libwebp.so").is_symlink()
        assert (tmp_path / "libwebp.so").read_bytes() == b"\x7fELF webp"
        assert hook.relative_files(tmp_path) == {"libwebp.so"}

    def test_a_link_out_of_the_payload_is_refused(self, hook: ModuleType,
                                                  tmp_path: Path) -> None:
        (tmp_path / "outside.so").write_bytes(b"x")
        (tmp_path / "payload").mkdir()
        (tmp_path / "payload" / "lib.so").symlink_to(tmp_path / "outside.so")
        with pytest.raises(hook.BuildError, match=r"lib\.so links outside the payload"):
            hook.materialize_links(tmp_path / "payload")

    def test_two_links_to_one_file_are_refused(self, hook: ModuleType, tmp_path: Path) -> None:
        (tmp_path / "real.so").write_bytes(b"x")
        (tmp_path / "a.so").symlink_to("real.so")
        (tmp_path / "b.so").symlink_to("real.so")
        with pytest.raises(hook.BuildError, match=r"both link to real\.so"):
            hook.materialize_links(tmp_path)
        assert (tmp_path / "real.so").is_file()  # nothing moved
