#!/usr/bin/env bash
# Install this checkout (editable) with the extras $2 into the virtual environment $1: `make demo`'s and `make test`'s
# set-up on a fresh machine.
#
# With uv when pip can fetch it (into that environment, nowhere else), with pip otherwise: the same requirements from
# the same index, both take the newest versions pyproject.toml allows. Why: on this 2-core machine with its caches
# warm, pip took 132 s to resolve and install the 116 packages, uv 35 s; make test has 15 minutes in all. uv reads its
# own settings, so pip's find-links and index settings (PIP_FIND_LINKS, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL) are passed
# on.
#
# pyspark is published as a source distribution only, and the registry's proxy marks it modified on every request,
# so uv built its wheel again at every set-up (~28 s of a 70 s install). The wheel of the pinned version is built once
# into $APPORTION_WHEEL_CACHE (default ~/.cache/apportion/wheels) and offered to uv as a find-links location: the
# version is pyproject.toml's pin, the resolution is still the index's. Without a pin (a range) nothing is cached.
#
# No bytecode is compiled here: the Makefile lets Python write each module's .pyc when it is first imported (where
# PYTHONDONTWRITEBYTECODE is set, as on this machine, every process otherwise compiled pyspark, pandas and pyarrow
# from source: 5.8 CPU-s a thin worker instead of 2.2). Compiling all 8,604 files at install took 29 s; the tests
# import ~1,700 of them.
set -euo pipefail
venv=$1 extras=$2
python="$venv/bin/python"
wheels="${APPORTION_WHEEL_CACHE:-$HOME/.cache/apportion/wheels}"
options=()
for link in ${PIP_FIND_LINKS:-}; do options+=(--find-links "$link"); done
[ -n "${PIP_INDEX_URL:-}" ] && options+=(--index-url "$PIP_INDEX_URL")
for index in ${PIP_EXTRA_INDEX_URL:-}; do options+=(--extra-index-url "$index"); done

pyspark_wheel() {  # the pinned pyspark's wheel in $wheels, built once (pip downloads the sdist, uv builds it)
    local pin work
    pin="$(sed -n 's/^ *"pyspark==\([0-9][0-9a-z.]*\)".*/\1/p' pyproject.toml | head -1)"
    [ -n "$pin" ] || return 0
    compgen -G "$wheels/pyspark-$pin-*.whl" >/dev/null && return 0
    echo "apportion: building pyspark $pin's wheel (once; cached in $wheels)..." >&2
    work="$(mktemp -d)"
    if "$python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$work/sdist" \
            "pyspark==$pin" && "$venv/bin/uv" build -q --wheel "${options[@]}" -o "$work/wheel" "$work/sdist"/*; then
        mkdir -p "$wheels"
        for wheel in "$work/wheel"/pyspark-*.whl; do  # copied under a hidden name, then renamed: never half a wheel
            cp "$wheel" "$wheels/.${wheel##*/}.partial" && mv "$wheels/.${wheel##*/}.partial" "$wheels/${wheel##*/}"
        done
    else
        echo "apportion: could not build pyspark's wheel; uv builds it in the install instead" >&2
    fi
    rm -rf "$work"
}

if "$python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1; then
    pyspark_wheel
    links=()
    [ -d "$wheels" ] && links=(--find-links "$wheels")
    "$venv/bin/uv" pip install -q --python "$python" "${options[@]}" "${links[@]}" -e ".[$extras]" && exit 0
    echo "apportion: uv could not install the environment; trying pip" >&2
fi
"$python" -m pip install -q --upgrade pip
"$python" -m pip install -q -e ".[$extras]"
