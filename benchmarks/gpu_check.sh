#!/usr/bin/env bash
# The GPU smoke test (CUDA IPC between stage processes, the in-process SGLang
# thinker); everything is in benchmarks/gpu_check.py, see its docstring.
#   benchmarks/gpu_check.sh [--sglang-model DIR]     (or VOICE_AGENT_SGLANG_MODEL=DIR)
# Exit 0 ok, 1 a check failed, 2 no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
exec "$PY" -m benchmarks.gpu_check "$@"
