#!/usr/bin/env bash
# The interpreter PYTHON names (default python3) and what identifies it: its version and its real path.
#   envs/python_identity.sh            prints e.g. "3.13.0 /root/.pyenv/versions/3.13.0/bin/python3.13"
#   envs/python_identity.sh --path     prints the command to run it by (what PYTHON names, or the interpreter found)
# PYTHON=python3.13 where no such command runs (a pyenv shim of a version not selected) is that version's
# interpreter (envs/find_python.sh). The Makefile names .venv's stamp by the identity, and make_daemon_env.sh keys
# the daemon's environment by it, so `PYTHON=python3.13 make test` builds (or links again) a 3.13 environment where
# .venv was another Python's. Exit 1 (saying so) where PYTHON names no interpreter.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
if ! "$python" -c '' >/dev/null 2>&1 && [[ "$python" =~ ^python([0-9]+\.[0-9]+t?)$ ]]; then
    python="$("$root/envs/find_python.sh" "${BASH_REMATCH[1]}")" || { echo "== no $PYTHON on this machine" >&2; exit 1; }
fi
if [ "${1:-}" = --path ]; then
    echo "$python"
    exit 0
fi
# the real path from inside the interpreter: a pyenv shim is one script for every version, a venv's python a link
"$python" -I -c 'import os, sys; print(sys.version.split()[0], os.path.realpath(sys.executable))' \
    || { echo "== $python does not run" >&2; exit 1; }
