"""llama.cpp's log goes to our logger: its chatter at debug level, nothing printed on stderr,
its errors still shown."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from runtime.models.think.llama_log import GGML_CONT, GGML_ERROR, LineJoiner

ROOT = Path(__file__).resolve().parents[3]
GGML_INFO, GGML_WARN = 2, 3


class Caught(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelno, record.getMessage()))


def joiner() -> tuple[LineJoiner, Caught]:
    logger = logging.getLogger("test.llama_log")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    caught = Caught()
    logger.handlers[:] = [caught]
    return LineJoiner(logger), caught


def test_pieces_become_lines_at_debug_and_errors_stay_errors():
    j, caught = joiner()
    j.piece(GGML_WARN, "load: control-looking token: 128247 '</s>' ")
    j.piece(GGML_CONT, "was not control-type\n")
    j.piece(GGML_INFO, "two lines\nin one piece\n")
    j.piece(GGML_ERROR, "failed to load model\n")
    j.piece(GGML_INFO, "no newline yet")
    assert caught.lines == [
        (logging.DEBUG, "load: control-looking token: 128247 '</s>' was not control-type"),
        (logging.DEBUG, "two lines"), (logging.DEBUG, "in one piece"),
        (logging.ERROR, "failed to load model")]
    j.piece(GGML_ERROR, " and an error in it\n")  # an error anywhere makes the line an error
    assert caught.lines[-1] == (logging.ERROR, "no newline yet and an error in it")


def test_a_real_model_load_prints_nothing_on_stderr():
    # A fresh interpreter: the callback is process-wide, and llama.cpp logs the load of
    # SmolLM2 (the wheel's GGUF) line by line, warnings included.
    code = """
import logging, sys
from runtime.models.think.llama_vocab import import_llama_cpp
from runtime.models.model_files import smollm2_gguf
lines = []
class H(logging.Handler):
    def emit(self, r): lines.append((r.levelno, r.getMessage()))
logging.getLogger("llama.cpp").addHandler(H()); logging.getLogger("llama.cpp").setLevel(logging.DEBUG)
lc = import_llama_cpp()  # routes the log by itself
lc.llama_backend_init()
params = lc.llama_model_default_params()
model = lc.llama_model_load_from_file(str(smollm2_gguf()).encode(), params)
assert model, "model did not load"
lc.llama_model_free(model)
print(len(lines), sum(1 for lv, _ in lines if lv == logging.DEBUG), flush=True)
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    total, debug = map(int, run.stdout.split())
    assert total > 10 and debug == total  # the load was logged, all of it at debug level
    assert run.stderr.strip() == ""
