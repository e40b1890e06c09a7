#!/usr/bin/env bash
# The CUDA check of issue 21, on a lent GPU machine (one `run` of the device tool; see docs/benchmarks.md,
# "CUDA run on a lent GPU"). The machine has python3 (3.12) with torch, jax and cupy for CUDA but no Jupyter
# packages and no network: they travel as Python 3.12 wheels in the ignored folder .whl (carried), together with
# a copy of ../shared/bench/validate.py. Results go to $OUT (at most 8 files):
#   facts.json     GPU, kernel, versions, what the confinement can use
#   validate.txt   ../shared/bench/validate.py over the set: the labels against real runs on the GPU
#   static.json    crane bench SET --mode static --json
#   auto.json      crane bench SET --mode auto --json
#   verdicts.json  real run and CRANE's auto verdict of every variant, with the sandbox's details
#   timing.json    transplant cold/warm with CUDA tensors, side-effect attempts, a forked CPU kernel
#   log.txt        everything the steps wrote on stderr
# `python3 benchmarks/cuda_check.py diagnose` (not run here) runs the transplant worker's environment without
# confinement, to tell a library's failure there from the confinement's.
# Usage (device): bash benchmarks/cuda_check.sh [SET]   (locally: OUT=/tmp/x PY=build/kernel-today/bin/python ...)
set -u
SET=${1:-benchmarks/cuda-lite}
PY=${PY:-python3}
OUT=${OUT:?OUT must name the output folder}
mkdir -p "$OUT"
if [ -z "${CRANE_NO_WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  # the committed CRANE (a copy of HEAD's server/ in .whl/server, made by the caller): others' edits in progress
  # in the shared tree do not travel into the measurement
  SRC=$PWD/server; [ -d .whl/server ] && SRC=$PWD/.whl/server
  export PYTHONPATH=/tmp/site:$SRC
  echo "crane source: $SRC $(cat .whl/COMMIT 2>/dev/null)" | tee -a "$OUT/log.txt"
fi
DAEMON=${DAEMON:-python3}
TIMING_ARGS=${TIMING_ARGS:-}
# jax takes 75 % of the GPU memory at its first use unless told otherwise: several kernels share the GPU here
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg XLA_PYTHON_CLIENT_PREALLOCATE=false
LOG=$OUT/log.txt
step() { echo "== $(date -u +%T) $*" | tee -a "$LOG"; }

step facts
timeout 45 "$DAEMON" benchmarks/cuda_check.py facts --python "$PY" >"$OUT/facts.json" 2>>"$LOG"
head -c 600 "$OUT/facts.json"; echo

step "background: validate, static, auto"
VALIDATE=${VALIDATE:-.whl/validate.py}
(timeout 200 "$PY" "$VALIDATE" "$SET" >"$OUT/validate.txt" 2>&1; echo "validate rc=$?" >>"$LOG") &
(timeout 200 "$DAEMON" -m crane bench "$SET" --mode static --python "$PY" --json --quiet >"$OUT/static.json" \
  2>>"$LOG"; echo "static rc=$?" >>"$LOG") &
(timeout 200 "$DAEMON" -m crane bench "$SET" --mode auto --python "$PY" --json >"$OUT/auto.json" \
  2>>"$LOG"; echo "auto rc=$?" >>"$LOG") &

step verdicts
timeout 200 "$DAEMON" benchmarks/cuda_check.py verdicts "$SET" --python "$PY" --out "$OUT/verdicts.json" 2>>"$LOG"
echo "verdicts rc=$?" | tee -a "$LOG"
wait
step timing
timeout ${TIMING_S:-90} "$DAEMON" benchmarks/cuda_check.py timing --python "$PY" --out "$OUT/timing.json" $TIMING_ARGS \
  2>>"$LOG"
echo "timing rc=$?" | tee -a "$LOG"
step done
grep -E "passed|FAIL" "$OUT/validate.txt"
"$DAEMON" - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
try:
    d = json.load(open(f"{out}/verdicts.json"))
    for r in d["rows"]:
        print(r["variant"], "real:", r["real_ename"] if r["real_crash"] else "clean", "| crane:",
              r["verdict"], r["decided_by"], r["sandbox_mode"], "| ok" if r["correct_vs_real"] else "| WRONG")
except Exception as exc:
    print("verdicts:", exc)
try:
    t = json.load(open(f"{out}/timing.json"))
    print("cold", t.get("cold_median"), "warm", t.get("warm_median"))
except Exception as exc:
    print("timing:", exc)
EOF
