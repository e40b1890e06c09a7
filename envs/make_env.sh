#!/usr/bin/env bash
# Build (once per version of a requirements file) an environment, the one the tests and benchmarks run kernels in or
# the daemon's (envs/make_daemon_env.sh), and point a link at it: envs/make_env.sh REQUIREMENTS CACHE_DIR LINK
# The environment lives outside the checkout (CACHE_DIR, default ~/.cache/crane-envs), keyed by the file's hash, so
# CI runs on the same machine reuse it; a build that did not finish is never used (the `.complete` marker is written
# last) and is rebuilt from scratch.
set -euo pipefail
req="$1"; cache="$2"; link="$3"
python="${PYTHON:-python3}"
name="$(basename "$req" .txt)-$(sha256sum "$req" | cut -c1-12)"
dir="$cache/$name"
if [ ! -f "$dir/.complete" ]; then
    echo "== building the environment $dir from $req (once per version of the file)" >&2
    rm -rf "$dir"
    mkdir -p "$cache"
    "$python" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    touch "$dir/.complete"
fi
mkdir -p "$(dirname "$link")"
ln -sfn "$dir" "$link"
