#!/usr/bin/env bash
# Every GPU check in one run on the GPU machine (one H200, 16 cores), from the project root, after
# `bash ../shared/device/prepare.sh` here with .whl and .device-kit carried along:
#
#   bash .device-kit/run.sh bash benchmarks/device/gpu_figures.sh            # tests, figures, scaling (<= 10 min)
#   bash .device-kit/run.sh bash benchmarks/device/gpu_figures.sh figures    # only some parts: tests figures replay scaling
#
# 1. tests: `pytest -m "gpu and not slow"` (bounded), then the slow gpu learning check (bounded);
# 2. figures: benchmarks/gpu.py, every GPU acceptance figure in one table (about 4 minutes);
# 3. replay: benchmarks/recurrent_replay.py on cuda, the update's chunk replay by the cells and fused (<= 60 s);
# 4. scaling: benchmarks/scaling.py on simple_spread_v3 with marljoint train's defaults, in the time left.
# The CSVs and logs go to $OUT (or ./gpu_figures when it is not set). Each part is bounded by `timeout`, so a part
# that hangs costs its own limit only; the whole stays under BUDGET seconds (default 570).
set -u
out=${OUT:-gpu_figures}
mkdir -p "$out"
budget=${BUDGET:-570}
parts=${*:-tests figures replay scaling}
left() { echo $((budget - SECONDS)); }
has() { [[ " $parts " == *" $1 "* ]]; }

if has tests; then
  timeout 120 python3 -m pytest tests -m "gpu and not slow" -q -p no:cacheprovider 2>&1 | tee "$out/pytest_gpu.log" | tail -25
  echo "pytest gpu: exit ${PIPESTATUS[0]}"
  timeout 150 python3 -m pytest tests -m "gpu and slow" -q -p no:cacheprovider 2>&1 | tee "$out/pytest_gpu_slow.log" | tail -8
  echo "pytest gpu slow: exit ${PIPESTATUS[0]}"
fi
if has figures; then
  timeout $(( $(left) < 400 ? $(left) : 400 )) python3 benchmarks/gpu.py --csv "$out/gpu.csv" 2>&1 | tee "$out/gpu.log"
  echo "gpu.py: exit ${PIPESTATUS[0]}"
fi
if has replay && [ "$(left)" -gt 90 ]; then
  timeout 60 python3 benchmarks/recurrent_replay.py --device cuda --repeats 20 2>&1 | tee "$out/recurrent_replay.log"
  echo "recurrent_replay.py: exit ${PIPESTATUS[0]}"
fi
if has scaling && [ "$(left)" -gt 60 ]; then
  timeout "$(left)" python3 benchmarks/scaling.py --envs simple_spread_v3 --shapes defaults --iterations 1 \
    --csv "$out/scaling.csv" 2>&1 | tee "$out/scaling.log" | tail -30
  echo "scaling.py: exit ${PIPESTATUS[0]}"
elif has scaling; then
  echo "scaling.py: skipped, $(left) s left of the budget"
fi
ls -l "$out"
