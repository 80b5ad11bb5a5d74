#!/usr/bin/env bash
# GPU checks, run on a machine with a CUDA device: the cuda_ipc unit test and
# a two-process CUDA IPC pipeline.  Needs the project's venv (make setup).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
$PY -m pytest -q -p no:cacheprovider tests/runtime/test_units.py -k cuda
$PY benchmarks/gpu_check.py
