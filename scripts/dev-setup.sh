# Installs everything the test suite needs on a fresh machine (Debian + CPython 3.10+).
# Run as: bash scripts/dev-setup.sh   (README and .ci/run both use it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

"$PY" -m pip install --quiet --disable-pip-version-check -e '.[test]'
# The original DeepSeek Harness client, for wire-compatibility tests only. Installed
# without its 95 MB runtime wheel: our `dsh` is the runtime it drives.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --pre \
    'deepseek-harness-sdk==0.2.1rc2'
"$PY" -m pip install --quiet --disable-pip-version-check 'pydantic>=2.12,<3'
