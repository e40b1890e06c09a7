#!/usr/bin/env bash
# End-to-end tests: the packaged CRANE extension in a real VS Code (code-server), driven by headless Chromium.
#
#   e2e/run.sh [SCENARIO ...]     scenarios: connection-file jupyter jupyter-deny fresh lm-tools (default: all five)
#
# The vsix must exist (`make vsix`; CRANE_VSIX=path overrides it). e2e/setup.sh installs/caches code-server,
# chromium and playwright-core (build/e2e). Each scenario gets a fresh run folder build/e2e/run-<scenario>
# (a copy of e2e/workspace, code-server's config, user data, HOME, XDG and Jupyter folders) and its own
# code-server on 127.0.0.1:<free port>, stopped before the next scenario starts:
#   connection-file  an ipykernel this script starts (cells 2-3 of sales.ipynb run in it by prime_kernel.py),
#                    named by the `crane.kernel.connectionFile` setting (crane.e2e.test.mjs);
#   jupyter          Microsoft's Jupyter extension (../shared/vendor, CRANE_JUPYTER_VSIX) owns the kernel,
#                    started from a kernelspec for $CRANE_PYTHON; CRANE reaches it through the extension's
#                    kernels API, the user allows it (jupyter.e2e.test.mjs);
#   jupyter-deny     the same in a fresh profile where the user denies access, then grants it later
#                    (jupyter-deny.e2e.test.mjs);
#   lm-tools         the kernel of connection-file, and a test extension (e2e/lm-tools-extension) that calls
#                    CRANE's language-model tools with vscode.lm.invokeTool (lm-tools.e2e.test.mjs);
#   fresh            no crane.python and no interpreter on PATH with CRANE: the extension creates its own server
#                    environment (pip, dependencies from the package index), attaches, and a second start reuses
#                    it (fresh.e2e.test.mjs).
# With more than one scenario the run goes in two lanes at once (CRANE_E2E_LANES=1: one after the other): the
# scenarios wait on a browser and a kernel far more than they compute, and each has its own folders, port and
# processes; the two Jupyter scenarios share a lane (they share one extensions folder). Each lane is this
# script again, with CRANE_E2E_LANE set.
# Every process started here runs in its own process group and is stopped by its id, also on failure or
# Ctrl-C. Artefacts: build/e2e/screenshots/*.png, build/e2e/logs/<scenario>/ (kernel, code-server, the CRANE
# output channel with the server's stderr, the Jupyter extension's log, all VS Code logs).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
BUILD="${CRANE_E2E_BUILD:-$ROOT/build/e2e}"
PYTHON="${CRANE_PYTHON:-$ROOT/.venv/bin/python}"
VSIX="${CRANE_VSIX:-$ROOT/vscode-client/crane-0.1.0.vsix}"
JUPYTER_VSIX="${CRANE_JUPYTER_VSIX:-$ROOT/../shared/vendor/ms-toolsai.jupyter-2025.4.1.vsix}"
JUPYTER_VSIX_SHA256="36a3711e19386feffa4e32069bacdd2d99f151923d3e165be444aa54ddf47a7f"
CS_BIN="$BUILD/code-server/node_modules/.bin/code-server"
LOGS="$BUILD/logs"
SHOTS="$BUILD/screenshots"
KERNELSPEC="crane-e2e-python"
KERNEL_DISPLAY_NAME="Python 3 (e2e venv)"

log() { printf "[e2e%s %s] %s\n" "${CRANE_E2E_LANE:+ $CRANE_E2E_LANE}" "$(date +%H:%M:%S)" "$*" >&2; }
t0=$(date +%s)

SCENARIOS=("$@")
[ "${#SCENARIOS[@]}" -gt 0 ] || SCENARIOS=(connection-file jupyter jupyter-deny fresh lm-tools)
for sc in "${SCENARIOS[@]}"; do
  case "$sc" in connection-file | jupyter | jupyter-deny | fresh | lm-tools) ;; *) log "unknown scenario $sc"; exit 2 ;; esac
done

[ -n "${CRANE_E2E_LANE:-}" ] || "$HERE/setup.sh"

[ -x "$PYTHON" ] || { log "no Python at $PYTHON (make setup, or set CRANE_PYTHON)"; exit 2; }
[ -f "$VSIX" ] || { log "no extension package at $VSIX (make vsix, or set CRANE_VSIX)"; exit 2; }
"$PYTHON" -c 'import crane, ipykernel, pandas' || { log "$PYTHON lacks crane/ipykernel/pandas (make setup)"; exit 2; }
if [[ " ${SCENARIOS[*]} " == *" jupyter"* ]]; then
  [ -f "$JUPYTER_VSIX" ] || { log "no Jupyter extension at $JUPYTER_VSIX (see ../shared/vendor/README.md, or set CRANE_JUPYTER_VSIX)"; exit 2; }
  if [ -z "${CRANE_JUPYTER_VSIX:-}" ]; then
    echo "$JUPYTER_VSIX_SHA256  $JUPYTER_VSIX" | sha256sum --check --status \
      || { log "$JUPYTER_VSIX is not the vendored ms-toolsai.jupyter 2025.4.1 (sha256 differs)"; exit 2; }
  fi
fi

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
stop_group() {  # stop_group PID: TERM its process group, KILL after 5 s
  local pid="$1"
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
}
stop_started() {  # every group still running, newest first
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_group "${PIDS[i]}"; done
  PIDS=()
}
collect_logs() {  # collect_logs RUN SCENARIO: the VS Code logs, the CRANE and Jupyter output channels
  local run="$1" dest="$LOGS/$2"
  if [ -d "$run/user-data/logs" ]; then
    cp -r "$run/user-data/logs" "$dest/vscode" 2>/dev/null || true
    find "$dest/vscode" -name '*CRANE.log' -exec cp {} "$dest/crane-output.log" \; 2>/dev/null || true
    find "$dest/vscode" -name '*-Jupyter.log' -exec cp {} "$dest/jupyter-output.log" \; 2>/dev/null || true
  fi
}
CURRENT_RUN="" CURRENT_SCENARIO=""
on_exit() {
  local rc=$?
  stop_started
  [ -z "$CURRENT_RUN" ] || collect_logs "$CURRENT_RUN" "$CURRENT_SCENARIO"
  log "done in $(($(date +%s) - t0)) s, exit $rc; screenshots: $SHOTS, logs: $LOGS"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- one scenario's folders, settings and code-server ------------------------------------------------------
new_run() {  # new_run SCENARIO: a fresh run folder; sets RUN and the environment its processes get (RUN_ENV)
  RUN="$BUILD/run-$1"
  rm -rf "$RUN" "$LOGS/$1"
  mkdir -p "$RUN/user-data/User" "$RUN/extensions" "$RUN/home" "$RUN/jupyter-runtime" "$RUN/xdg" "$LOGS/$1"
  cp -r "$HERE/workspace" "$RUN/workspace"
  CURRENT_RUN="$RUN" CURRENT_SCENARIO="$1"
  # the server's kernel discovery and the Jupyter extension see only this run's connection files; the kernel's
  # history database, Jupyter's data and VS Code's HOME are this run's own
  RUN_ENV=(
    HOME="$RUN/home"
    JUPYTER_RUNTIME_DIR="$RUN/jupyter-runtime"
    XDG_DATA_HOME="$RUN/xdg/data" XDG_CONFIG_HOME="$RUN/xdg/config" XDG_CACHE_HOME="$RUN/xdg/cache"
    IPYTHONDIR="$RUN/ipython"
  )
}

write_settings() {  # write_settings 'EXTRA JSON MEMBERS,' : user settings.json (quiet workbench + CRANE)
  cat >"$RUN/user-data/User/settings.json" <<EOF
{
  $1
  "crane.python": "$PYTHON",
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
}

install_extension() {  # install_extension EXTENSIONS_DIR VSIX
  "$CS_BIN" --user-data-dir "$RUN/user-data" --extensions-dir "$1" --install-extension "$2" \
    >>"$LOGS/$CURRENT_SCENARIO/install-extension.log" 2>&1 \
    || { cat "$LOGS/$CURRENT_SCENARIO/install-extension.log" >&2; exit 1; }
}

start_code_server() {  # start_code_server EXTENSIONS_DIR [ENV...]: sets CS_PID and PORT
  local ext="$1"; shift
  PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf 'bind-addr: 127.0.0.1:%s\nauth: none\ncert: false\n' "$PORT" >"$RUN/config.yaml"
  log "starting code-server on 127.0.0.1:$PORT ($CURRENT_SCENARIO)"
  start_bg "$LOGS/$CURRENT_SCENARIO/code-server.log" env "${RUN_ENV[@]}" "$@" "$CS_BIN" \
    --config "$RUN/config.yaml" --user-data-dir "$RUN/user-data" --extensions-dir "$ext" \
    --bind-addr "127.0.0.1:$PORT" --auth none --disable-telemetry --disable-update-check \
    --disable-workspace-trust --disable-getting-started-override --disable-proxy "$RUN/workspace"
  CS_PID=$BG_PID
  "$PYTHON" - "http://127.0.0.1:$PORT/healthz" "$CS_PID" <<'EOF' || { log "code-server did not answer /healthz"; cat "$LOGS/$CURRENT_SCENARIO/code-server.log" >&2; exit 1; }
import http.client, json, os, sys, time, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
deadline, last = time.monotonic() + 90, None
while True:
    try:  # code-server's own answer: JSON with a "status" (a half-started server or another program can answer too)
        if "status" in json.loads(opener.open(sys.argv[1], timeout=5).read()):
            break
    except (OSError, http.client.HTTPException, ValueError, TypeError) as exc:
        last = exc
    try:
        os.kill(int(sys.argv[2]), 0)
    except ProcessLookupError:
        sys.exit("code-server exited before answering /healthz")
    if time.monotonic() > deadline:
        sys.exit(f"no answer from code-server's /healthz in 90 s (last: {last!r})")
    time.sleep(0.2)
EOF
}

run_browser_test() {  # run_browser_test TEST_FILE [ENV...]: node --test in its own process group; returns its status
  local file="$1"; shift
  log "running $file"
  # in its own process group too, so that the browser Playwright starts is stopped with it
  start_bg - env -C "$HERE" CRANE_E2E_URL="http://127.0.0.1:$PORT/?folder=$RUN/workspace" \
    CRANE_E2E_SCREENSHOTS="$SHOTS" CRANE_E2E_RUN="$RUN" CRANE_E2E_PYTHON="$PYTHON" \
    CRANE_E2E_LOGS="$RUN/user-data/logs" CRANE_E2E_CHROMIUM="${CRANE_E2E_CHROMIUM:-/usr/bin/chromium}" "$@" \
    node --test --test-timeout=600000 --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=spec --test-reporter-destination="$LOGS/$CURRENT_SCENARIO/steps.log" "$file"
  local rc=0
  wait "$BG_PID" || rc=$?
  return "$rc"
}

end_scenario() {  # stop everything the scenario started and keep its logs
  stop_started
  collect_logs "$RUN" "$CURRENT_SCENARIO"
  CURRENT_RUN="" CURRENT_SCENARIO=""
}

# ---- scenario: a kernel named by crane.kernel.connectionFile -----------------------------------------------
scenario_connection_file() {
  local notebook="sales.ipynb" primed=(2 3)  # the cells "already run"; cell 4 is the one predicted to crash
  new_run connection-file
  local conn="$RUN/kernel.json"
  log "starting ipykernel ($PYTHON)"
  start_bg "$LOGS/connection-file/kernel.log" env -C "$RUN/workspace" "${RUN_ENV[@]}" \
    "$PYTHON" -m ipykernel_launcher -f "$conn" --ip=127.0.0.1
  env "${RUN_ENV[@]}" "$PYTHON" "$HERE/prime_kernel.py" "$conn" "$RUN/workspace/$notebook" "${primed[@]}" \
    || { log "could not run the cells in the kernel"; end_scenario; return 1; }
  write_settings "\"crane.kernel.connectionFile\": \"$conn\","
  log "installing $(basename "$VSIX") into code-server"
  install_extension "$RUN/extensions" "$VSIX"
  start_code_server "$RUN/extensions"
  local rc=0
  run_browser_test crane.e2e.test.mjs CRANE_E2E_KERNEL="$conn" CRANE_E2E_PRIMED="${#primed[@]}" || rc=$?
  end_scenario
  return "$rc"
}

# ---- scenario: install and go (the extension builds its own server environment) -----------------------------
scenario_lm_tools() {
  local notebook="sales.ipynb" primed=(2 3)
  new_run lm-tools
  local conn="$RUN/kernel.json"
  log "starting ipykernel ($PYTHON)"
  start_bg "$LOGS/lm-tools/kernel.log" env -C "$RUN/workspace" "${RUN_ENV[@]}" \
    "$PYTHON" -m ipykernel_launcher -f "$conn" --ip=127.0.0.1
  env "${RUN_ENV[@]}" "$PYTHON" "$HERE/prime_kernel.py" "$conn" "$RUN/workspace/$notebook" "${primed[@]}" \
    || { log "could not run the cells in the kernel"; end_scenario; return 1; }
  write_settings "\"crane.kernel.connectionFile\": \"$conn\","
  log "packaging the test extension (e2e/lm-tools-extension)"
  (cd "$HERE/lm-tools-extension" && "$ROOT/vscode-client/node_modules/.bin/vsce" package --no-dependencies \
    --skip-license --allow-missing-repository --out "$RUN/lm-tools-e2e.vsix" >"$LOGS/lm-tools/vsce.log" 2>&1) \
    || { cat "$LOGS/lm-tools/vsce.log" >&2; end_scenario; return 1; }
  log "installing $(basename "$VSIX") and the test extension into code-server"
  install_extension "$RUN/extensions" "$VSIX"
  install_extension "$RUN/extensions" "$RUN/lm-tools-e2e.vsix"
  start_code_server "$RUN/extensions" CRANE_E2E_LM_OUT="$RUN/lm-tools-results.json"
  local rc=0
  run_browser_test lm-tools.e2e.test.mjs CRANE_E2E_KERNEL="$conn" CRANE_E2E_PRIMED="${#primed[@]}" \
    CRANE_E2E_LM_OUT="$RUN/lm-tools-results.json" || rc=$?
  end_scenario
  return "$rc"
}

scenario_fresh() {
  local notebook="sales.ipynb" primed=(2 3)
  new_run fresh
  # PATH without this checkout's .venv: the extension must find a Python 3.10+ that does not have CRANE
  local path_no_venv
  path_no_venv=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -F "$ROOT/.venv" | paste -sd: -)
  if env PATH="$path_no_venv" "${RUN_ENV[@]}" python3 -c 'import crane' >/dev/null 2>&1; then
    log "fresh: python3 on PATH has CRANE installed; the scenario needs one without it"; end_scenario; return 1
  fi
  local conn="$RUN/kernel.json"
  log "starting ipykernel ($PYTHON)"
  start_bg "$LOGS/fresh/kernel.log" env -C "$RUN/workspace" "${RUN_ENV[@]}" \
    "$PYTHON" -m ipykernel_launcher -f "$conn" --ip=127.0.0.1
  env "${RUN_ENV[@]}" "$PYTHON" "$HERE/prime_kernel.py" "$conn" "$RUN/workspace/$notebook" "${primed[@]}" \
    || { log "could not run the cells in the kernel"; end_scenario; return 1; }
  write_settings "\"crane.kernel.connectionFile\": \"$conn\","
  sed -i '/"crane.python"/d' "$RUN/user-data/User/settings.json"  # the extension's own environment, no override
  log "installing $(basename "$VSIX") into code-server"
  install_extension "$RUN/extensions" "$VSIX"
  start_code_server "$RUN/extensions" PATH="$path_no_venv"
  local rc=0
  run_browser_test fresh.e2e.test.mjs CRANE_E2E_STORAGE="$RUN/user-data/User/globalStorage/crane.crane" || rc=$?
  end_scenario
  return "$rc"
}

# ---- scenarios with Microsoft's Jupyter extension ------------------------------------------------------------
JUPYTER_EXTENSIONS=""  # one extensions folder (CRANE + Jupyter) for both Jupyter scenarios, installed once
scenario_jupyter() {  # scenario_jupyter NAME TEST_FILE
  new_run "$1"
  # a kernelspec for the test's Python: the Jupyter extension finds it through JUPYTER_PATH (no Python extension)
  "$PYTHON" -m ipykernel install --prefix "$RUN/jupyter" --name "$KERNELSPEC" \
    --display-name "$KERNEL_DISPLAY_NAME" >"$LOGS/$1/kernelspec.log" 2>&1 \
    || { cat "$LOGS/$1/kernelspec.log" >&2; exit 1; }
  write_settings '"jupyter.logging.level": "debug", "jupyter.askForKernelRestart": true,'
  if [ -z "$JUPYTER_EXTENSIONS" ]; then
    JUPYTER_EXTENSIONS="$RUN/extensions"
    log "installing $(basename "$VSIX") and $(basename "$JUPYTER_VSIX") into code-server"
    install_extension "$JUPYTER_EXTENSIONS" "$VSIX"
    install_extension "$JUPYTER_EXTENSIONS" "$JUPYTER_VSIX"
  fi
  # the bridge stops waiting for an answer after 2 s instead of 10: the scenario sees it while the prompt is open;
  # after a refusal it asks again on every user action (no 2 s spacing), so the scenario's next action is one
  # whatever the machine's pace (the spacing itself is unit-tested: kernelBridge.test.ts)
  start_code_server "$JUPYTER_EXTENSIONS" JUPYTER_PATH="$RUN/jupyter/share/jupyter" CRANE_BRIDGE_WAIT_MS=2000 \
    CRANE_BRIDGE_RETRY_MS=0
  local rc=0
  run_browser_test "$2" CRANE_E2E_KERNEL_NAME="$KERNEL_DISPLAY_NAME" \
    CRANE_E2E_RUNTIME_DIR="$RUN/jupyter-runtime" || rc=$?
  end_scenario
  return "$rc"
}

if [ -z "${CRANE_E2E_LANE:-}" ]; then
  rm -rf "$SHOTS" "$LOGS" "$BUILD"/run "$BUILD"/run-*
  mkdir -p "$SHOTS" "$LOGS"
  if [ "${CRANE_E2E_LANES:-2}" -gt 1 ] && [ "${#SCENARIOS[@]}" -gt 1 ]; then
    lane_a=() lane_b=()  # the Jupyter scenarios (one extensions folder) in lane a, the others in lane b
    for sc in "${SCENARIOS[@]}"; do
      case "$sc" in jupyter | jupyter-deny) lane_a+=("$sc") ;; *) lane_b+=("$sc") ;; esac
    done
    [ "${#lane_a[@]}" -gt 0 ] || { lane_a=("${lane_b[0]}"); lane_b=("${lane_b[@]:1}"); }
    [ "${#lane_b[@]}" -gt 0 ] || { lane_b=("${lane_a[-1]}"); unset 'lane_a[-1]'; }
    log "two lanes: ${lane_a[*]} | ${lane_b[*]}"
    start_bg - env CRANE_E2E_LANE=a "$HERE/run.sh" "${lane_a[@]}"
    pid_a=$BG_PID
    start_bg - env CRANE_E2E_LANE=b "$HERE/run.sh" "${lane_b[@]}"
    pid_b=$BG_PID
    rc_a=0 rc_b=0
    wait "$pid_a" || rc_a=$?
    wait "$pid_b" || rc_b=$?
    PIDS=()
    [ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ] || { log "failed lanes: $([ "$rc_a" -eq 0 ] || echo "a ($rc_a)") $([ "$rc_b" -eq 0 ] || echo "b ($rc_b)")"; exit 1; }
    exit 0
  fi
fi
failed=()
for sc in "${SCENARIOS[@]}"; do
  s0=$(date +%s)
  rc=0
  case "$sc" in
    connection-file) scenario_connection_file || rc=$? ;;
    jupyter) scenario_jupyter jupyter jupyter.e2e.test.mjs || rc=$? ;;
    jupyter-deny) scenario_jupyter jupyter-deny jupyter-deny.e2e.test.mjs || rc=$? ;;
    fresh) scenario_fresh || rc=$? ;;
    lm-tools) scenario_lm_tools || rc=$? ;;
  esac
  log "scenario $sc: $([ "$rc" -eq 0 ] && echo passed || echo "FAILED ($rc)") in $(($(date +%s) - s0)) s"
  [ "$rc" -eq 0 ] || failed+=("$sc")
done
failure_summary() {  # the failed steps with their messages, without stack frames: a log's tail shows why
  local sc
  for sc in "${failed[@]}"; do
    [ -f "$LOGS/$sc/steps.log" ] || continue
    printf '%s\n' "--- $sc: failed steps ---"
    awk '/ failing tests:$/ { on = 1; next } on && !/^ +at / && NF' "$LOGS/$sc/steps.log" | cut -c1-300 | head -n 24
  done >&2
}
[ "${#failed[@]}" -eq 0 ] || { failure_summary; log "failed scenarios: ${failed[*]}"; exit 1; }
