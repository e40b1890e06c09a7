#!/usr/bin/env bash
# End-to-end test: the packaged CRANE extension in a real VS Code (code-server), driven by headless Chromium.
#
#   e2e/run.sh            (the vsix must exist: `make vsix`; CRANE_VSIX=path overrides it)
#
# 1. e2e/setup.sh installs/caches code-server, chromium and playwright-core (build/e2e).
# 2. A fresh run folder build/e2e/run: a copy of e2e/workspace, code-server's config, user data (settings.json
#    pointing CRANE at the kernel) and extensions folder, with the .vsix installed into it.
# 3. An ipykernel on 127.0.0.1 with cwd the workspace; cells 2-3 of sales.ipynb run in it (prime_kernel.py).
# 4. code-server on 127.0.0.1:<free port>; e2e/crane.e2e.test.mjs (node --test, playwright-core) drives it.
# Every process started here runs in its own process group and is stopped by its id on exit, also on
# failure or Ctrl-C. Artefacts: build/e2e/screenshots/*.png, build/e2e/logs/ (kernel, code-server, the
# CRANE output channel with the server's stderr, the VS Code logs).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
BUILD="${CRANE_E2E_BUILD:-$ROOT/build/e2e}"
PYTHON="${CRANE_PYTHON:-$ROOT/.venv/bin/python}"
VSIX="${CRANE_VSIX:-$ROOT/vscode-client/crane-0.1.0.vsix}"
CS_BIN="$BUILD/code-server/node_modules/.bin/code-server"
RUN="$BUILD/run"
LOGS="$BUILD/logs"
SHOTS="$BUILD/screenshots"
NOTEBOOK="sales.ipynb"
PRIMED_CELLS=(2 3)     # the cells "already run" in the kernel; cell 4 is the one predicted to crash

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
t0=$(date +%s)

"$HERE/setup.sh"

[ -x "$PYTHON" ] || { log "no Python at $PYTHON (make setup, or set CRANE_PYTHON)"; exit 2; }
[ -f "$VSIX" ] || { log "no extension package at $VSIX (make vsix, or set CRANE_VSIX)"; exit 2; }
"$PYTHON" -c 'import crane, ipykernel, pandas' || { log "$PYTHON lacks crane/ipykernel/pandas (make setup)"; exit 2; }

# ---- processes: each in its own process group, stopped by id -----------------------------------------------
PIDS=()
start_bg() {  # start_bg LOGFILE|- CMD...: runs CMD in a new session (process group = its pid); sets BG_PID
  local out="$1"; shift
  if [ "$out" = - ]; then  # keep this script's stdout and stderr
    setsid "$@" </dev/null &
  else
    setsid "$@" >"$out" 2>&1 </dev/null &
  fi
  BG_PID=$!
  PIDS+=("$BG_PID")
}
stop_all() {
  local rc=$? pid i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    pid="${PIDS[i]}"
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  # the VS Code logs, including the CRANE output channel (the server's stderr)
  if [ -d "$RUN/user-data/logs" ]; then
    cp -r "$RUN/user-data/logs" "$LOGS/vscode" 2>/dev/null || true
    find "$LOGS/vscode" -name '*CRANE*' -exec cp {} "$LOGS/crane-output.log" \; 2>/dev/null || true
  fi
  log "done in $(($(date +%s) - t0)) s, exit $rc; screenshots: $SHOTS, logs: $LOGS"
  exit "$rc"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- a fresh run folder ---------------------------------------------------------------------------------
rm -rf "$RUN" "$LOGS" "$SHOTS"
mkdir -p "$RUN/user-data/User" "$RUN/extensions" "$RUN/jupyter-runtime" "$RUN/xdg" "$LOGS" "$SHOTS"
cp -r "$HERE/workspace" "$RUN/workspace"
export JUPYTER_RUNTIME_DIR="$RUN/jupyter-runtime"   # the server's kernel discovery sees only this run's files
export XDG_DATA_HOME="$RUN/xdg/data" XDG_CONFIG_HOME="$RUN/xdg/config" XDG_CACHE_HOME="$RUN/xdg/cache"
export IPYTHONDIR="$RUN/ipython"                    # the kernel's history database is this run's own

# ---- the kernel ---------------------------------------------------------------------------------------
CONN="$RUN/kernel.json"
log "starting ipykernel ($PYTHON)"
start_bg "$LOGS/kernel.log" env -C "$RUN/workspace" "$PYTHON" -m ipykernel_launcher -f "$CONN" --ip=127.0.0.1
"$PYTHON" "$HERE/prime_kernel.py" "$CONN" "$RUN/workspace/$NOTEBOOK" "${PRIMED_CELLS[@]}"

# ---- code-server ------------------------------------------------------------------------------------------
PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$RUN/config.yaml" <<EOF
bind-addr: 127.0.0.1:$PORT
auth: none
cert: false
EOF
cat >"$RUN/user-data/User/settings.json" <<EOF
{
  "crane.python": "$PYTHON",
  "crane.kernel.connectionFile": "$CONN",
  "crane.mode": "static",
  "security.workspace.trust.enabled": false,
  "workbench.startupEditor": "none",
  "workbench.tips.enabled": false,
  "workbench.enableExperiments": false,
  "workbench.welcomePage.walkthroughs.openOnInstall": false,
  "telemetry.telemetryLevel": "off",
  "update.mode": "none",
  "extensions.autoCheckUpdates": false,
  "extensions.autoUpdate": false,
  "extensions.ignoreRecommendations": true,
  "chat.commandCenter.enabled": false,
  "window.commandCenter": false,
  "editor.hover.delay": 150,
  "files.autoSave": "off",
  "git.enabled": false,
  "git.openRepositoryInParentFolders": "never"
}
EOF
CS_ARGS=(--config "$RUN/config.yaml" --user-data-dir "$RUN/user-data" --extensions-dir "$RUN/extensions")
log "installing $(basename "$VSIX") into code-server"
"$CS_BIN" "${CS_ARGS[@]}" --install-extension "$VSIX" >"$LOGS/install-extension.log" 2>&1 \
  || { cat "$LOGS/install-extension.log" >&2; exit 1; }
log "starting code-server on 127.0.0.1:$PORT"
start_bg "$LOGS/code-server.log" "$CS_BIN" "${CS_ARGS[@]}" --bind-addr "127.0.0.1:$PORT" --auth none \
  --disable-telemetry --disable-update-check --disable-workspace-trust --disable-getting-started-override \
  --disable-proxy "$RUN/workspace"
"$PYTHON" - "http://127.0.0.1:$PORT/healthz" <<'EOF' || { log "code-server did not answer /healthz"; cat "$LOGS/code-server.log" >&2; exit 1; }
import sys, time, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
deadline = time.monotonic() + 60
while True:
    try:
        opener.open(sys.argv[1], timeout=2).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.1)
EOF

# ---- the browser test ----------------------------------------------------------------------------------
log "running the browser scenario"
export CRANE_E2E_URL="http://127.0.0.1:$PORT/?folder=$RUN/workspace"
export CRANE_E2E_SCREENSHOTS="$SHOTS" CRANE_E2E_RUN="$RUN" CRANE_E2E_KERNEL="$CONN"
export CRANE_E2E_PRIMED="${#PRIMED_CELLS[@]}" CRANE_E2E_PYTHON="$PYTHON"
export CRANE_E2E_CHROMIUM="${CRANE_E2E_CHROMIUM:-/usr/bin/chromium}"
# in its own process group too, so that the browser Playwright starts is stopped with it
start_bg - env -C "$HERE" node --test --test-reporter=spec --test-timeout=300000 crane.e2e.test.mjs
wait "$BG_PID"
