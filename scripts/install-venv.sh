#!/usr/bin/env bash
# Install this checkout (editable) with the extras $2 into the virtual environment $1: `make demo`'s and `make test`'s
# set-up on a fresh machine.
#
# With uv when pip can fetch it (into that environment, nowhere else), with pip otherwise: the same requirements from
# the same index, both take the newest versions pyproject.toml allows. Why: on this 2-core machine with its caches
# warm, pip took 132 s to resolve and install the 116 packages, uv 35 s without compiling bytecode (of which 28 s
# rebuild pyspark's sdist, which the registry's proxy marks modified on every request); a clean clone's whole set-up
# (venv, install with bytecode, tags) took 66 s with uv, ~146 s with pip; make test has 15 minutes in all. uv reads its own
# settings, so pip's find-links and index settings (PIP_FIND_LINKS, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL) are passed on.
# --compile-bytecode, as pip does: uv writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set (this
# machine) none is ever written, so every process compiled pyspark, pandas and pyarrow from source: importing a thin
# worker's modules took 5.8 CPU-s instead of 2.2, and make test ~20 % longer.
set -euo pipefail
venv=$1 extras=$2
python="$venv/bin/python"
options=()
for link in ${PIP_FIND_LINKS:-}; do options+=(--find-links "$link"); done
[ -n "${PIP_INDEX_URL:-}" ] && options+=(--index-url "$PIP_INDEX_URL")
for index in ${PIP_EXTRA_INDEX_URL:-}; do options+=(--extra-index-url "$index"); done
if "$python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1; then
    "$venv/bin/uv" pip install -q --compile-bytecode --python "$python" "${options[@]}" -e ".[$extras]" && exit 0
    echo "apportion: uv could not install the environment; trying pip" >&2
fi
"$python" -m pip install -q --upgrade pip
"$python" -m pip install -q -e ".[$extras]"
