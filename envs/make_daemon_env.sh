#!/usr/bin/env bash
# The daemon's environment: CRANE installed editable from this checkout, with its test, lint, bench and LLM extras:
#   envs/make_daemon_env.sh VENV CACHE_DIR
# (PYTHON picks the interpreter; EXTRAS="" installs CRANE alone: the language server on another Python, whose tests
# run from .venv, `make daemon-pythons`.)
# Built by envs/make_env.sh from a requirements file naming this checkout, the hash of its pyproject.toml and the
# interpreter (version and real path, envs/python_identity.sh): once per (pyproject.toml, checkout path, Python) in
# CACHE_DIR, outside the checkout, and linked as VENV, so CI runs on a clean checkout of the same machine reuse it
# (a fresh one takes minutes), and another PYTHON links VENV to its own. A VENV that is a real folder (made before
# this script) is kept and brought up to date in place, as before (made again where another interpreter made it);
# so is one made where CACHE_DIR cannot be written.
set -euo pipefail
venv="$1"; cache="$2"
python="${PYTHON:-python3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# PYTHON=python3.13 where no such command runs (a pyenv shim of a version not selected): that version's interpreter
python="$(PYTHON="$python" "$root/envs/python_identity.sh" --path)"
export PYTHON="$python"
# what the environment is built for: the interpreter's version and real path (envs/python_identity.sh)
identity="$("$root/envs/python_identity.sh")"
extras="${EXTRAS-test,lint,bench,llm}"
spec="$root${extras:+[$extras]}"
. "$root/envs/build_once.sh"

in_place() {
    # a folder made by another interpreter (PYTHON changed) is made again by this one
    if [ -x "$venv/bin/python" ] && [ "$(PYTHON="$venv/bin/python" "$root/envs/python_identity.sh" 2>/dev/null)" != "$identity" ]; then
        echo "== $venv was made by another Python: made again by $identity" >&2
        "$python" -m venv --clear "$venv"
    fi
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
    echo "# pyproject.toml $(sha256sum "$root/pyproject.toml" | cut -c1-12), Python $identity"
    echo "-e $spec"
} >"$req"
exec "$root/envs/make_env.sh" "$req" "$cache" "$venv"
