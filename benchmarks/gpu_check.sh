#!/usr/bin/env bash
# The whole GPU check, in one command for a short loan of a GPU (docs/performance.md, On a GPU): on the lent machine,
# from the repository's root with .gpu-carry carried (python -m benchmarks.gpu_carry builds it beforehand),
#   bash benchmarks/gpu_check.sh
# installs the carried wheels (benchmarks/gpu_setup.sh), runs `pytest -m cuda tests/test_cuda.py` (at most 4 min) and
# `python -m benchmarks.gpu --quick` (at most 5.5 min), and leaves in $OUT (else ./gpu-check-out) the machine, both
# logs and the benchmark's report (gpu-<date>-cuda-<gpu>-quick.json and .md: copy them to benchmarks/results/).
out="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$out"
. benchmarks/gpu_setup.sh >"$out/machine.txt" 2>&1 || { cat "$out/machine.txt"; exit 1; }
cat "$out/machine.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv >>"$out/machine.txt" 2>&1
nproc >>"$out/machine.txt"
started=$(date +%s)
timeout 240 python3 -m pytest -m cuda tests/test_cuda.py -q -p no:cacheprovider -rs --durations=20 2>&1 \
  | tee "$out/test-cuda.log"
tests=${PIPESTATUS[0]}
echo "pytest -m cuda: exit $tests after $(( $(date +%s) - started )) s" | tee -a "$out/test-cuda.log"
started=$(date +%s)
timeout 330 python3 -m benchmarks.gpu --quick --output-dir "$out" >"$out/bench-gpu.log" 2>&1
bench=$?
tail -n 40 "$out/bench-gpu.log"
echo "python -m benchmarks.gpu --quick: exit $bench after $(( $(date +%s) - started )) s" | tee -a "$out/bench-gpu.log"
exit $(( tests != 0 || bench != 0 ))
