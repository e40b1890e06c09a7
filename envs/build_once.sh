# Shell functions for the build-once caches (sourced by make_env.sh, make_daemon_env.sh and npm_modules.sh): a
# build lives outside the checkout, keyed by what defines it, and is linked into the checkout, so CI runs on clean
# checkouts of the same machine reuse it.

# cache_writable CACHE_DIR: whether the cache folder exists or can be made, and can be written.
cache_writable() {
    mkdir -p "$1" 2>/dev/null && [ -w "$1" ]
}

# build_once DIR BUILD_COMMAND...: runs BUILD_COMMAND DIR into an empty DIR unless DIR holds a finished build. A
# build that did not finish is never used (the `.complete` marker is written last) and is redone from scratch.
build_once() {
    local dir="$1"; shift
    [ ! -f "$dir/.complete" ] || return 0
    rm -rf "$dir"
    mkdir -p "$dir"
    "$@" "$dir"
    touch "$dir/.complete"
}

# link_to TARGET LINK: points LINK at TARGET (its folder made first).
link_to() {
    mkdir -p "$(dirname "$2")"
    ln -sfn "$1" "$2"
}
