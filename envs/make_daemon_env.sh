#!/usr/bin/env bash
# The daemon's environment: CRANE installed editable from this checkout, with its test, lint, bench and LLM extras:
#   envs/make_daemon_env.sh VENV CACHE_DIR
# (PYTHON picks the interpreter; EXTRAS="" installs CRANE alone: the language server on another Python, whose tests
# run from .venv, `make daemon-pythons`.)
# Built by envs/make_env.sh from a requirements file naming this checkout and the hash of its pyproject.toml: once
# per (pyproject.toml, checkout path, Python) in CACHE_DIR, outside the checkout, and linked as VENV, so CI runs on
# a clean checkout of the same machine reuse it (a fresh one takes minutes). A VENV that is a real folder (made
# before this script) is kept and brought up to date in place, as before; so is one made where CACHE_DIR cannot be
# written.
set -euo pipefail
venv="$1"; cache="$2"
python="${PYTHON:-python3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# PYTHON=python3.13 where no such command runs (a pyenv shim of a version not selected): that version's interpreter
if ! "$python" -c '' 2>/dev/null && [[ "$python" =~ ^python([0-9]+\.[0-9]+t?)$ ]]; then
    python="$("$root/envs/find_python.sh" "${BASH_REMATCH[1]}")" || { echo "== no $PYTHON on this machine" >&2; exit 1; }
fi
export PYTHON="$python"
extras="${EXTRAS-test,lint,bench,llm}"
spec="$root${extras:+[$extras]}"
. "$root/envs/build_once.sh"

in_place() {
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    exec "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$spec"
}
if [ -d "$venv" ] && [ ! -L "$venv" ]; then
    in_place
fi
if ! cache_writable "$cache"; then
    echo "== $cache cannot be written: $venv is built in the checkout instead (not reused by the next checkout)" >&2
    [ ! -L "$venv" ] || rm -f "$venv"
    in_place
fi
# one requirements file per environment (.venv's keeps its name, build/daemon-env.txt)
name="$(basename "$venv")"
[ "$name" != .venv ] || name=daemon-env
req="$root/build/$name.txt"
mkdir -p "$(dirname "$req")"
{
    echo "# pyproject.toml $(sha256sum "$root/pyproject.toml" | cut -c1-12), $("$python" -c 'import sys; print(sys.version.split()[0])')"
    echo "-e $spec"
} >"$req"
exec "$root/envs/make_env.sh" "$req" "$cache" "$venv"
