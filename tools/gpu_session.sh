#!/usr/bin/env bash
# One GPU session (issue 31), in one command that ends inside the device's 10-minute limit:
#   1. the single-device runs: `muon-repro bench single_device --scale gpu` (Muon and AdamW at 8k-256k tokens
#      per step, bf16 autocast, 2 rounds: the first traced, the second timed only);
#   2. `muon-repro calibrate --ranks 1` on the GPU alone (kernels, Newton-Schulz against matmul, no collectives);
#   3. Gram Newton-Schulz (tools/gram_ns_bench.py) when its wheels are carried in .whl/.
# Each stage has its own time limit and the results are packed whatever happened, into OUT/gpu_runs.tar.gz
# (split into parts of 15 MiB when larger) and the logs.
#   bash tools/gpu_session.sh OUT            on the GPU machine (PYTHONPATH is set to the working tree)
#   bash tools/gpu_session.sh OUT --dry-run  here: the same stages on the CPU, at the tiny scale, in seconds
set -u
OUT=${1:?usage: bash tools/gpu_session.sh OUT [--dry-run]}
MODE=${2:-}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
WORK=$(mktemp -d)
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
if [ "$MODE" = --dry-run ]; then
  BACKEND=gloo QUICK=--quick LIMITS=(60 60 30)
  BENCH=(custom --optimizer muon --dp 1 --tp 1 --preset tiny --tokens-per-step 128 --seq-len 16 --precision bf16 --micro-batches 2)
else
  BACKEND=nccl QUICK= LIMITS=(300 100 80)
  BENCH=(single_device --scale gpu)
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
fi
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" | tee -a "$OUT/session.log"
PROFILE=$(python3 -c "from muon_repro.bench.environment import recording_profile; print(recording_profile('$BACKEND'))")
log "profile $PROFILE"

log "1/3 bench ${BENCH[*]}"
timeout -k 10 "${LIMITS[0]}" python3 -m muon_repro bench "${BENCH[@]}" --backend "$BACKEND" --trials 2 --traced-trials 1 \
  --out "$WORK/traces" --no-progress >"$OUT/bench.log" 2>&1
log "bench exit $?"

log "2/3 calibrate --ranks 1"
timeout -k 10 "${LIMITS[1]}" python3 -m muon_repro calibrate --backend "$BACKEND" --ranks 1 $QUICK --profile "$PROFILE" \
  --out "$WORK/traces/$PROFILE/costmodel/machine.json" >"$OUT/calibrate.log" 2>&1
log "calibrate exit $?"

log "3/3 Gram Newton-Schulz"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  [ -f .whl/cutlass_base.tar.xz ] && tar xJf .whl/cutlass_base.tar.xz -C /tmp/site
  GRAM_PATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/python_packages:$PYTHONPATH
else
  GRAM_PATH=$PYTHONPATH
fi
PYTHONPATH=$GRAM_PATH timeout -k 10 "${LIMITS[2]}" python3 tools/gram_ns_bench.py --budget-s $((LIMITS[2] - 15)) \
  --out "$WORK/traces/$PROFILE/costmodel/gram_newton_schulz.json" >"$OUT/gram.log" 2>&1
log "gram exit $?"

tar czf "$OUT/gpu_runs.tar.gz" -C "$WORK" traces
if [ "$(stat -c %s "$OUT/gpu_runs.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M -d "$OUT/gpu_runs.tar.gz" "$OUT/gpu_runs.tar.gz.part" && rm "$OUT/gpu_runs.tar.gz"
fi
log "packed: $(ls "$OUT" | tr '\n' ' ')"
