#!/usr/bin/env bash
# One GPU session (issues 43 and 46), in one command that ends inside 8 minutes:
#   1. the study's protocol on one rank (`bench --protocol study --world-size 1`, 3 rounds): its optimizer scope's
#      host span against its kernels' GPU time, with no collective;
#   2. `calibrate --ranks 1` on the GPU alone: kernels, Newton-Schulz against the bf16 matmul at the 369M and 7B
#      shapes, and the size curves at the runs' own pass sizes;
#   3. each Newton-Schulz variant's accuracy against the SVD, in fp32 and bf16 on the GPU (optim.polar_accuracy);
#   4. ours against Gram Newton-Schulz, eager and compiled (tools/gram_ns_bench.py; its package when its wheels
#      are carried in .whl/, else ours alone);
#   5. the single-device group (`bench single_device --scale gpu`: Muon and AdamW at 8k-256k tokens per step, bf16),
#      5 rounds, the first traced, in whatever time the stages before it left: rounds are interleaved, so a stage
#      stopped at its limit keeps every complete round.
# Each stage has its own time limit, and everything, logs included, is packed whatever happened into
# OUT/gpu_runs.tar.gz (split into parts of 15 MiB when larger) beside OUT/session.log: at most 8 files come back.
# The device gets the working tree without .git: stamp the clean commit first (python -m muon_repro.provenance stamp)
# and carry .muon_repro_commit.json, so that every run names its commit and verify knows its code.
#   bash tools/gpu_session.sh OUT            on the GPU machine (PYTHONPATH is set to the working tree)
#   bash tools/gpu_session.sh OUT --dry-run  here: the same stages on the CPU, at the tiny scale, in about three minutes;
#                                            its archive holds a DRY_RUN marker, so that tools/gpu_ingest refuses it
#   bash tools/gpu_session.sh OUT --only bench  one call per part: only the stages named (a comma-separated list of
#                                            study, calibrate, accuracy, gram, bench), so that a lease's device time
#                                            goes to two calls on a warm machine (the bench's 5 rounds need ~7 minutes
#                                            of the 8); tools/gpu_ingest takes both calls' folders at once
# It runs from any folder (the working tree is the script's own). Exit status: 0 when every stage run exited 0; 1 when
# one failed, stopped at its limit or was skipped (the log names each stage's exit), everything packed all the same;
# 2 for bad arguments.
set -u
STAGES=(study calibrate accuracy gram bench) # in the order they run
USAGE="usage: bash tools/gpu_session.sh OUT [--dry-run] [--only STAGE[,STAGE...]] (stages: ${STAGES[*]})"
case "${1:-}" in
-h | --help)
  echo "$USAGE"
  exit 0
  ;;
"")
  echo "gpu_session.sh: give the folder for the session's results (OUT); $USAGE" >&2
  exit 2
  ;;
-*)
  echo "gpu_session.sh: OUT '$1' starts with '-': give the output folder first, then the options; $USAGE" >&2
  exit 2
  ;;
esac
OUT=$1
shift
MODE=
ONLY=" ${STAGES[*]} " # the stages to run, space-delimited
while [ $# -gt 0 ]; do
  case "$1" in
  --dry-run) MODE=--dry-run ;;
  --only)
    if [ $# -lt 2 ] || [ -z "$2" ]; then
      echo "gpu_session.sh: --only takes a comma-separated list of stages (${STAGES[*]}); $USAGE" >&2
      exit 2
    fi
    ONLY=" "
    for name in ${2//,/ }; do
      if [[ " ${STAGES[*]} " != *" $name "* ]]; then
        echo "gpu_session.sh: --only: no stage '$name'; the stages are ${STAGES[*]}; $USAGE" >&2
        exit 2
      fi
      ONLY+="$name "
    done
    shift
    ;;
  *)
    echo "gpu_session.sh: unknown argument '$1' after OUT; the options are --dry-run and --only; $USAGE" >&2
    exit 2
    ;;
  esac
  shift
done
if ! mkdir -p "$OUT"; then
  echo "gpu_session.sh: cannot make OUT '$OUT': give a folder that can be written; $USAGE" >&2
  exit 2
fi
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) # the working tree: the script's own, whatever folder it is run from
cd "$ROOT" || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT # a signal ends the script through exit, so that the trap runs
trap 'exit 130' INT
trap 'exit 143' TERM
LOGS="$WORK/logs"
mkdir -p "$LOGS"
START=$(date +%s)
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/session.log"; }
PACK=(traces logs) # what the archive holds
FAILED=()         # the stages that did not exit 0: name (exit N), or name (skipped)
if [ "$MODE" = --dry-run ]; then
  echo "gpu_session.sh --dry-run: the CPU at the tiny scale, not a GPU session's results (tools/gpu_ingest refuses them)" \
    >"$WORK/DRY_RUN"
  PACK+=(DRY_RUN)
  # limits for a slow CPU under load (a 2-core CI machine running other tests): the dry run checks the plumbing,
  # not the GPU's budget, and the study's 18 runs alone took 136 s on an idle 2-core machine
  BACKEND=gloo QUICK=--quick DEVICE=cpu TOTAL=780 STUDY_S=360 CALIBRATE_S=120 ACCURACY_S=120 GRAM_S=60
  BENCH=(custom --optimizer muon --dp 1 --tp 1 --preset tiny --tokens-per-step 128 --seq-len 16 --precision bf16
    --micro-batches 2)
else
  BACKEND=nccl QUICK= DEVICE=cuda TOTAL=465 STUDY_S=60 CALIBRATE_S=110 ACCURACY_S=25 GRAM_S=50
  BENCH=(single_device --scale gpu)
  nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1
fi
# what recorded the runs: the device, its driver, torch and NCCL, the source's digest and commit
python3 - <<'EOF' 2>&1 | tee -a "$OUT/session.log"
import torch
from muon_repro.provenance import source_digest, tree_commit
cuda = torch.cuda.is_available()
nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else "-"
device = torch.cuda.get_device_name() if cuda else "cpu"
found = tree_commit()  # git's, else the commit stamp carried with the tree
print(f"device {device}; torch {torch.__version__}; cuda {torch.version.cuda}; nccl {nccl}")
print(f"muon_repro source sha256 {source_digest()}; commit {found['git_sha']}, changed since: {found['git_dirty']}")
if found["git_dirty"] is not False:
    print("WARNING: no clean commit: verify will count these runs apart (python -m muon_repro.provenance stamp, then carry it)")
EOF
PROFILE=$(python3 -c "from muon_repro.bench.environment import recording_profile; print(recording_profile('$BACKEND'))")
if [ -z "$PROFILE" ]; then
  FAILED+=("profile (muon_repro.bench.environment.recording_profile printed none)")
  PROFILE=unknown-profile
fi
log "profile $PROFILE; stages:$ONLY"
COSTMODEL="$WORK/traces/$PROFILE/costmodel"
mkdir -p "$COSTMODEL"

# stage NAME LIMIT_S COMMAND...: runs COMMAND under LIMIT_S (and never past the session's TOTAL), its output in a log
stage() {
  local name=$1 limit=$2
  shift 2
  [[ "$ONLY" != *" $name "* ]] && return # not asked for (--only): neither run nor failed
  local left=$((TOTAL - ($(date +%s) - START) - 15))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    log "$name skipped: $left s left"
    FAILED+=("$name (skipped)")
    return
  fi
  log "$name (at most ${limit} s): $*"
  local code=0
  timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1 || code=$?
  log "$name exit $code"
  if [ "$code" -ne 0 ]; then
    local why="exit $code"
    if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then why+=": stopped at its limit"; fi
    FAILED+=("$name ($why)")
  fi
}

stage study "$STUDY_S" python3 -m muon_repro bench --protocol study --world-size 1 --backend "$BACKEND" --trials 3 \
  --out "$WORK/traces" --no-progress
stage calibrate "$CALIBRATE_S" python3 -m muon_repro calibrate --backend "$BACKEND" --ranks 1 $QUICK --profile "$PROFILE" \
  --out "$COSTMODEL/machine.json"
stage accuracy "$ACCURACY_S" python3 -m muon_repro.optim.polar_accuracy --device "$DEVICE" --json "$COSTMODEL/ns_accuracy.json"
GRAM_PATH=$PYTHONPATH
if [[ "$ONLY" == *" gram "* ]] && [ -d "$ROOT/.whl" ] && ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
  SITE="$WORK/site" # removed with WORK
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$ROOT"/.whl/*.whl
  [ -f "$ROOT/.whl/cutlass_base.tar.xz" ] && tar xJf "$ROOT/.whl/cutlass_base.tar.xz" -C "$SITE"
  GRAM_PATH=$SITE:$SITE/nvidia_cutlass_dsl/python_packages:$PYTHONPATH
fi
stage gram "$GRAM_S" env PYTHONPATH="$GRAM_PATH" python3 "$ROOT/tools/gram_ns_bench.py" --budget-s $((GRAM_S - 15)) \
  --out "$COSTMODEL/gram_newton_schulz.json"
stage bench "$TOTAL" python3 -m muon_repro bench "${BENCH[@]}" --backend "$BACKEND" --trials 5 --traced-trials 1 \
  --out "$WORK/traces" --no-progress

cp "$OUT/session.log" "$LOGS/"
rm -f "$OUT/gpu_runs.tar.gz" "$OUT"/gpu_runs.tar.gz.part* # an earlier session's parts would mix with these
if ! tar czf "$OUT/gpu_runs.tar.gz" -C "$WORK" "${PACK[@]}"; then
  FAILED+=("packing (tar)")
elif [ "$(stat -c %s "$OUT/gpu_runs.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M -d "$OUT/gpu_runs.tar.gz" "$OUT/gpu_runs.tar.gz.part" && rm "$OUT/gpu_runs.tar.gz"
fi
log "packed in $(($(date +%s) - START)) s: $(ls "$OUT" | tr '\n' ' ')"
if [ ${#FAILED[@]} -gt 0 ]; then
  log "not complete: $(printf '%s, ' "${FAILED[@]}")what there was is packed (each stage's log: the archive's logs/)"
  exit 1
fi
