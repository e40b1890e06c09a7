#!/usr/bin/env bash
# Installs what the end-to-end test needs, idempotently, caching it under build/e2e (code-server outside the
# checkout, in CRANE_E2E_CACHE, default ~/.cache/crane-e2e, linked from build/e2e/code-server: CI runs on a clean
# checkout of the same machine reuse it):
#   - Debian packages chromium (the browser), libkrb5-dev (gssapi headers for code-server's `kerberos`
#     module) and ripgrep (seeds @vscode/ripgrep's download cache; its postinstall would fetch from GitHub);
#   - code-server $CODE_SERVER_VERSION installed with npm into $CACHE/code-server-$CODE_SERVER_VERSION;
#   - playwright-core for the test driver (e2e/package-lock.json), which drives /usr/bin/chromium.
# Workarounds from ../shared/notes/environment.md: npm_config_unsafe_perm and npm_config_yes for code-server's
# postinstall as root (node-pty's build runs `npx node-gyp`), a pre-seeded ripgrep cache.
# A second run does nothing but check (about a second).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
BUILD="${CRANE_E2E_BUILD:-$ROOT/build/e2e}"
CODE_SERVER_VERSION="4.100.3"          # the last code-server release for Node 20 (VS Code 1.100.3)
RIPGREP_CACHE_NAME="vscode-ripgrep-cache-1.15.11"
RIPGREP_TARBALL="ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz"
CACHE="${CRANE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crane-e2e}"
CS_PREFIX="$CACHE/code-server-$CODE_SERVER_VERSION"  # an npm project folder: code-server in node_modules/
CS_LINK="$BUILD/code-server"             # where run.sh finds it
CS_BIN="$CS_PREFIX/node_modules/.bin/code-server"
CS_STAMP="$CS_PREFIX/.installed-$CODE_SERVER_VERSION"

log() { printf '[e2e setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

mkdir -p "$BUILD"

# ---- Debian packages ---------------------------------------------------------------------------------------
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
[ -e /usr/include/gssapi/gssapi.h ] || missing+=(libkrb5-dev)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
    exit 2
  fi
  log "apt-get install ${missing[*]}"
  apt-get update -q >"$BUILD/apt.log" 2>&1 || { cat "$BUILD/apt.log" >&2; exit 2; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    >>"$BUILD/apt.log" 2>&1 || { tail -40 "$BUILD/apt.log" >&2; exit 2; }
fi

# ---- code-server -------------------------------------------------------------------------------------------
if [ ! -e "$CS_STAMP" ] || [ ! -x "$CS_BIN" ]; then
  log "npm install code-server@$CODE_SERVER_VERSION into $CS_PREFIX (about a minute)"
  rm -rf "$CS_PREFIX"
  mkdir -p "$CS_PREFIX" "$BUILD/tmp"
  # @vscode/ripgrep's postinstall downloads this tarball from GitHub unless it is in its cache under $TMPDIR.
  rg_cache="$BUILD/tmp/$RIPGREP_CACHE_NAME"
  if [ ! -s "$rg_cache/$RIPGREP_TARBALL" ]; then
    mkdir -p "$rg_cache" "$BUILD/tmp/rg-pack"
    cp "$(command -v rg)" "$BUILD/tmp/rg-pack/rg"
    tar -C "$BUILD/tmp/rg-pack" -czf "$rg_cache/$RIPGREP_TARBALL" rg
  fi
  # A local install (cwd, no -g, no --prefix): npm exports non-default options such as `global` and `prefix`
  # to lifecycle scripts as npm_config_*, and code-server's postinstall runs a nested `npm install` in
  # lib/vscode that would then install into the very folder it is installing from.
  printf '{"name":"crane-e2e-code-server","private":true}\n' >"$CS_PREFIX/package.json"
  (
    cd "$CS_PREFIX"
    export TMPDIR="$BUILD/tmp"
    export npm_config_unsafe_perm=true npm_config_yes=true
    export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
    npm install --no-save --loglevel=error "code-server@$CODE_SERVER_VERSION"
  ) >"$BUILD/code-server-install.log" 2>&1 || {
    tail -60 "$BUILD/code-server-install.log" >&2
    log "code-server install failed; full log: $BUILD/code-server-install.log"
    exit 2
  }
  "$CS_BIN" --version >/dev/null
  touch "$CS_STAMP"
fi
if [ "$(readlink "$CS_LINK" 2>/dev/null)" != "$CS_PREFIX" ]; then
  rm -rf "$CS_LINK"  # an install of an earlier layout, or a link to another version
  ln -s "$CS_PREFIX" "$CS_LINK"
fi

# ---- playwright-core ---------------------------------------------------------------------------------------
if [ ! -e "$HERE/node_modules/playwright-core/package.json" ] \
  || [ "$HERE/package-lock.json" -nt "$HERE/node_modules/.package-lock.json" ]; then
  log "npm ci (playwright-core)"
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi

log "ready: code-server $("$CS_BIN" --version | head -1), $(chromium --version 2>/dev/null)"
