#!/usr/bin/env bash
# Build (once per version of a requirements file) an environment, the one the tests and benchmarks run kernels in or
# the daemon's (envs/make_daemon_env.sh), and point a link at it: envs/make_env.sh REQUIREMENTS CACHE_DIR LINK
# The environment lives outside the checkout (CACHE_DIR, default ~/.cache/crane-envs), keyed by the file's hash, so
# CI runs on the same machine reuse it; a build that did not finish is never used (the `.complete` marker is written
# last) and is rebuilt from scratch (envs/build_once.sh).
set -euo pipefail
req="$1"; cache="$2"; link="$3"
python="${PYTHON:-python3}"
. "$(dirname "${BASH_SOURCE[0]}")/build_once.sh"
name="$(basename "$req" .txt)-$(sha256sum "$req" | cut -c1-12)"
dir="$cache/$name"

venv_from_requirements() {
    echo "== building the environment $1 from $req (once per version of the file)" >&2
    "$python" -m venv "$1"
    "$1/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
}
build_once "$dir" venv_from_requirements
link_to "$dir" "$link"
