#!/usr/bin/env bash
# The profiler on a real GPU, in under 8 minutes on one GPU: the reference workload (naive and tuned) on
# --gpus 1 and on --gpus 2 (one GPU split in two), a sync-heavy script and an input-bound script, and the naive
# reference with `--what-if all`. Prints each verdict and its shares, then whether sync > 0, whether naive is
# input-bound and whether an input change is the best measured what-if (a failed check exits 1).
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]      # needs `pip install -e '.[gpu]'` (PYTHON=... to pick one)
#
# Without a GPU (no nvidia-smi listing one) it runs the same commands on logical CPU devices with a few
# rounds each (the plumbing, in a few minutes), and prints the checks without enforcing them.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
out="${1:-$(mktemp -d /tmp/tfdoctor-gpu-check.XXXXXX)}"
mkdir -p "$out"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  nvidia-smi -L
  rounds=(--steps 20) script_rounds=(--steps 10) enforce=--enforce
else
  echo "gpu_check: no GPU found: the CPU fallback (logical CPU devices, a few rounds; checks not enforced)"
  rounds=(--steps 3 --warmup 1) script_rounds=(--steps 4 --warmup 1) enforce=
fi
"$python" -c 'import tensorflow as tf; print("TensorFlow", tf.__version__, "GPUs:", tf.config.list_physical_devices("GPU"))' 2>/dev/null
started=$SECONDS
failed=0
profile() {  # NAME ARGS...: one report as JSON; its progress and errors on the terminal
  local name=$1; shift
  echo "gpu_check: $name: tfdoctor profile $*"
  # the report options go first: what follows `--` in ARGS is the script's own command line
  if ! timeout 300 "$python" -m tfdoctor profile --format json --logdir "$out/logs/$name" \
      --output "$out/$name.json" "$@"; then
    echo "gpu_check: $name FAILED"
    failed=1
  fi
}
profile reference_1_both --gpus 1 --pipeline both "${rounds[@]}"
profile reference_2_both --gpus 2 --pipeline both "${rounds[@]}"
profile sync_heavy_2 --gpus 2 "${script_rounds[@]}" -- python benchmarks/gpu_check/sync_heavy.py
profile input_bound_2 --gpus 2 "${script_rounds[@]}" -- python tests/scripts/input_bound.py
profile what_if_naive_2 --gpus 2 --pipeline naive --what-if all "${rounds[@]}"
echo "gpu_check: the profiles took $((SECONDS - started)) s; reports in $out"
"$python" benchmarks/gpu_check/summary.py "$out" $enforce || failed=1
exit $failed
