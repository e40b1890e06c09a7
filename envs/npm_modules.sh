#!/usr/bin/env bash
# The client's node_modules: `npm ci` once per package-lock.json (and Node version) in CACHE_DIR, outside the
# checkout, linked as PROJECT/node_modules, so CI runs on clean checkouts of the same machine reuse it (a fresh
# `npm ci` unpacks 218 MB: 21 CPU-s):  envs/npm_modules.sh PROJECT CACHE_DIR
# A node_modules that is a real folder (made before this script) is kept and brought up to date in place with
# `npm ci`, as before; so is one made where CACHE_DIR cannot be written. A build that did not finish is never used
# and is redone from scratch (envs/build_once.sh).
set -euo pipefail
project="$(cd "$1" && pwd)"; cache="$2"
modules="$project/node_modules"
. "$(dirname "${BASH_SOURCE[0]}")/build_once.sh"
npm_ci() { (cd "$1" && npm ci --no-audit --no-fund --loglevel=error); }

if [ -d "$modules" ] && [ ! -L "$modules" ]; then
    npm_ci "$project"; exit 0
fi
if ! cache_writable "$cache"; then
    echo "== $cache cannot be written: node_modules is installed in $project instead (not reused)" >&2
    rm -f "$modules"
    npm_ci "$project"; exit 0
fi
key="$(cat "$project/package-lock.json" <(node --version) | sha256sum | cut -c1-12)"

npm_ci_of_project() {
    echo "== npm ci into $1 (once per package-lock.json)" >&2
    cp "$project/package.json" "$project/package-lock.json" "$1/"
    npm_ci "$1"
}
dir="$cache/$(basename "$project")-$key"
build_once "$dir" npm_ci_of_project
link_to "$dir/node_modules" "$modules"
