#!/usr/bin/env bash
# CUDA checks in one short run, for a machine with an NVIDIA GPU:
#   1. the whole suite, so the tests that skip on CPU ("needs CUDA") run: CUDA-event step
#      timing, CUDA memory stats, fp16 + GradScaler, OOM handling, A+B and partial on CUDA;
#   2. the benchmarks on the GPU, with small step counts, their tables and JSON kept in OUT.
# Usage: bash tests/benchmarks/cuda_checks.sh [OUT_DIR]   (about 5-8 minutes on one GPU)
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:-cuda-checks}"
mkdir -p "$out"
py="${PYTHON:-.venv/bin/python}"
"$py" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))" | tee "$out/device.txt" || exit 1
status=0
QT_QPA_PLATFORM=offscreen "$py" -m pytest tests/core -q -rs -x -p no:cacheprovider 2>&1 | tee "$out/pytest-core.txt" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
run() { local name=$1; shift; echo "== $name"; "$py" "tests/benchmarks/$name.py" --device cuda "$@" --json "$out/$name.json" 2>&1 | tee "$out/$name.txt" | tail -20 || status=1; }
run bench_engine --steps 20 --rounds 2
run bench_reparam --steps 60
run bench_partial --case all --steps 20
"$py" -m workbench bench resnet18 --device cuda --plan resources/plans/resnet18-fc-only.json --plan resources/plans/resnet18-layer4-a-plus-b.json --steps 20 2>&1 | tee "$out/workbench-bench.txt" || status=1
echo "results in $out/ (exit $status)"
exit $status
