#!/usr/bin/env bash
# The daemon's environment: CRANE installed editable from this checkout, with its test, lint, bench and LLM extras:
#   envs/make_daemon_env.sh VENV CACHE_DIR
# Built once per (pyproject.toml, checkout path, Python) in CACHE_DIR, outside the checkout, and linked as VENV,
# so CI runs on a clean checkout of the same machine reuse it (a fresh one takes minutes); a build that did not
# finish is never used (the `.complete` marker is written last) and is rebuilt from scratch. A VENV that is a real
# folder (made before this script) is kept and brought up to date in place, as before.
set -euo pipefail
venv="$1"; cache="$2"
python="${PYTHON:-python3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
install() { "$1/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root[test,lint,bench,llm]"; }

if [ -d "$venv" ] && [ ! -L "$venv" ]; then
    install "$venv"
    exit 0
fi
key="$({ cat "$root/pyproject.toml"; echo "$root"; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-12)"
dir="$cache/daemon-$key"
if [ ! -f "$dir/.complete" ]; then
    echo "== building the daemon's environment $dir (once per version of pyproject.toml)" >&2
    rm -rf "$dir"
    mkdir -p "$cache"
    "$python" -m venv "$dir"
    install "$dir"
    touch "$dir/.complete"
fi
ln -sfn "$dir" "$venv"
