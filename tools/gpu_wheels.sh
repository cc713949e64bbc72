#!/usr/bin/env bash
# The wheels the GPU session's Gram Newton-Schulz stage needs (tools/gram_ns_bench.py), fetched here into .whl/ (git
# ignores it) for a device call to carry: the device machine reaches no package index, and its image lacks them.
#   bash tools/gpu_wheels.sh        then: python -m tools.device_tree hold --carry .muon_repro_commit.json .whl
# gram-newton-schulz 0.1.6 pins quack-kernels 0.5.0 and nvidia-cutlass-dsl 4.5.2, whose compiled part
# (nvidia-cutlass-dsl-libs-base, a 74 MB wheel, 180 MB unpacked) is repacked as cutlass_base.tar.xz (52 MB, about 3
# minutes of xz here) so that a call fits its 64 MiB; tools/gpu_session.sh installs the wheels and unpacks it into a
# folder of its own, for that stage alone. For the device's Python (3.12, x86-64). Exit status: 0, or pip's or tar's.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEELS="$ROOT/.whl"
PINS=(gram-newton-schulz==0.1.6 quack-kernels==0.5.0 nvidia-cutlass-dsl==4.5.2 apache-tvm-ffi==0.1.9
  torch-c-dlpack-ext==0.1.5)
BASE=nvidia-cutlass-dsl-libs-base==4.5.2
download() { # the device's platform, whatever this machine's
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$1" "${@:2}"
}
mkdir -p "$WHEELS"
download "$WHEELS" "${PINS[@]}"
if [ ! -f "$WHEELS/cutlass_base.tar.xz" ]; then
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  download "$WORK" "$BASE"
  (cd "$WORK" && python3 -m zipfile -e nvidia_cutlass_dsl_libs_base-*.whl unpacked)
  tar cf - -C "$WORK/unpacked" . | xz -9 -T0 >"$WHEELS/cutlass_base.tar.xz.tmp"
  mv "$WHEELS/cutlass_base.tar.xz.tmp" "$WHEELS/cutlass_base.tar.xz" # a stopped run leaves no half archive
fi
du -sh "$WHEELS"
