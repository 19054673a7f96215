"""Fuzzing ``.env`` parsing (:mod:`dsh.config.envsnapshot` over python-dotenv's parser).

Files are built from lines of every kind a user writes or mistypes (``export``, quotes of
both kinds, escapes, comments, blank lines, names that are invalid or bootstrap-only,
stray text) and raw text. Every value carries a marker, so the properties can say:

* reading any file gives a dict of valid names or an :class:`EnvFileError` (exit 2)
  naming the file and a line; never another exception, and the same answer twice;
* a bootstrap-only name (``PATH``, ``PYTHON*``, ``DSH_*``, ``LD_*``, ``DYLD_*``) that the
  parser reads as a name is refused from the home file (an error) and ignored from a
  project file (a warning naming it), routing settings ignored from an untrusted project
  file;
* no error message contains a value;
* the real ``dsh doctor --json``, given such a home ``.env``, reports it (exit 0 or 1)
  and prints no value.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dsh.config.envfile import EnvFile, read_env_file
from dsh.core.errors import EnvFileError

MARK = "vAlUe"  # in every generated value; never a name, never printed
BOOTSTRAP = re.compile(r"^(PATH|PYTHON.*|DSH_.*|LD_.*|DYLD_.*)$")
NETWORK = re.compile(r"^((HTTP|HTTPS|ALL|NO|FTP)_PROXY|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|"
                     r"CURL_CA_BUNDLE|NODE_EXTRA_CA_CERTS|.*_BASE_URL|.*_API_BASE|.*_API_URL|"
                     r"DSH_POSTGRES_DSN)$", re.IGNORECASE)

names = st.one_of(
    st.sampled_from(["A", "api_key", "_X1", "PATH", "PYTHONPATH", "DSH_HOME", "LD_PRELOAD",
                     "DYLD_X", "HTTPS_PROXY", "no_proxy", "SSL_CERT_FILE", "X_BASE_URL",
                     "DSH_POSTGRES_DSN", "1BAD", "A-B",
                     "A.B", "É", "A B", ""]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
)
raw_values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"),
                     max_size=12).map(lambda text: MARK + text.replace(MARK, ""))
values = st.one_of(
    raw_values.map(lambda v: v.replace("#", "").replace("'", "").replace('"', "")),
    raw_values.map(lambda v: "'" + v.replace("'", "") + "'"),
    raw_values.map(lambda v: '"' + v.replace('"', "").replace("\\", "") + '"'),
    raw_values.map(lambda v: "'" + v),  # an unterminated quote
    raw_values,
)
lines = st.one_of(
    st.tuples(st.sampled_from(["", "export ", "  ", "export\t"]), names,
              st.sampled_from(["=", " = ", "=\t", ":"]), values,
              st.sampled_from(["", " # comment", "  "])).map("".join),
    st.sampled_from(["", "# only a comment", "   ", "=", "export", "A", "'A'=x", "[section]"]),
)
files = st.lists(lines, max_size=8).map("\n".join) | st.text(max_size=80).filter(
    lambda text: MARK not in text)


def read(tmp: Path, text: str, *, is_home: bool) -> EnvFile | EnvFileError:
    path = tmp / ".env"
    path.write_text(text, encoding="utf-8")
    try:
        return read_env_file(path, is_home=is_home)
    except EnvFileError as exc:
        return exc


PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPERTY
@given(files, st.booleans())
@example(text=f"API_KEY:sk-{MARK}", is_home=True)  # a mistyped "=" once showed the key
def test_any_env_file_reads_or_fails_cleanly_and_no_error_shows_a_value(
        tmp_path: Path, text: str, is_home: bool) -> None:
    first = read(tmp_path, text, is_home=is_home)
    second = read(tmp_path, text, is_home=is_home)
    if isinstance(first, EnvFileError):
        assert isinstance(second, EnvFileError) and str(second) == str(first)
        assert first.exit_code == 2
        message = str(first)
        assert message.startswith(f"{tmp_path / '.env'}:"), message
        assert MARK not in message, message
        return
    assert first == second
    for name in first.values:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), name
        assert not BOOTSTRAP.match(name) or NETWORK.match(name), name
        if not is_home:
            assert not NETWORK.match(name), name
    for warning in first.ignored:
        assert warning.startswith(f"{tmp_path / '.env'}:"), warning
        assert MARK not in warning, warning


@PROPERTY
@given(st.sampled_from(["PATH", "PYTHONHOME", "DSH_PROFILE", "LD_LIBRARY_PATH",
                        "DYLD_INSERT_LIBRARIES"]), values, st.lists(lines, max_size=4),
       st.booleans())
def test_a_bootstrap_name_is_always_refused(tmp_path: Path, name: str, value: str,
                                            before: list[str], is_home: bool) -> None:
    """An error in the home file; ignored, with a warning naming it, in a project file."""
    text = "\n".join(["# settings", f"{name}={value}", *before])
    result = read(tmp_path, text, is_home=is_home)
    if is_home:
        assert isinstance(result, EnvFileError), result
        assert MARK not in str(result)
    elif not isinstance(result, EnvFileError):  # a later malformed line is still an error
        assert name not in result.values
        assert any(f":2: {name} ignored" in w for w in result.ignored), result
        assert MARK not in "".join(result.ignored)


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files)
def test_the_launcher_never_crashes_on_a_home_env_nor_prints_a_value(
        dsh_home: Path, text: str) -> None:
    (dsh_home / ".env").write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "dsh", "doctor", "--json"],
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr)
    assert MARK not in proc.stdout + proc.stderr, (proc.stdout, proc.stderr)
