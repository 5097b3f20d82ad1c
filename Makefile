# One-command entry points. `make export` and `make test` install into .venv when needed.
MODEL ?= qwen3-vl
# With CHECKPOINT=DIR and no MODEL, the checkpoint's config.json names the family (builders.vision takes its
# default config) and the stages go to build/<DIR's folder name>; a MODEL given as well must be of that family.
MODEL_GIVEN := $(filter command line environment,$(origin MODEL))
CHECKPOINT ?=
DYNAMO ?=
# OPS=standard: only the export stage, with ai.onnx ops only, into build/MODEL/standard/ (for OpenVINO, the ONNX
# reference evaluator and runtimes without Microsoft's contrib ops; docs/runtimes.md). The later stages are ONNX
# Runtime's (they fuse its contrib ops), so they do not run.
OPS ?=
FP16 ?=
# The OpenVINO INT8 variant (`python -m quantize ov-int8`: NNCF, OpenVINO IR, the package's
# openvino/vision_encoder_int8.xml; docs/runtime-openvino.md) is built for the families that ship it by default
# (`--if-shipped`: families/shipping.py `Shipping.ov_int8`, Qwen3-VL: the variant `--engine auto` runs first on
# AVX-512 BF16 CPUs, with AMX or without, bench/results/cpu-race-amx.md, bench/results/cpu-race-avx512-bf16.md).
# OV_INT8=1 builds it for every family (at published dims the others miss the floor on held-out photos that
# `--engine auto` asks for: Qwen3.5 0.99789, Qwen2-VL 0.9979955; docs/quantization.md); OV_INT8=0 skips it.
OV_INT8 ?=
# STATIC=WxH[,WxH...]: static specializations for NPUs instead of the dynamic pipeline (docs/npu.md): per size,
# build/MODEL/static-WxH/export (builders.vision --static), .../qnn (A16W8 QDQ) and .../fp16 (HTP fp16 precision).
STATIC ?=
comma := ,
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The WebGPU software stack (docs/webgpu.md): Mesa's lavapipe and onnxruntime-webgpu in their own folder.
WEBGPU := .webgpu
WEBGPU_STAMP := $(WEBGPU)/.installed
BUILD := build/$(if $(or $(MODEL_GIVEN),$(if $(CHECKPOINT),,no-checkpoint)),$(MODEL),$(notdir $(patsubst %/,%,$(CHECKPOINT))))
# The flags of the int8, int4 and ov-int8 stages: INT8_FLAGS / INT4_FLAGS / OV_INT8_FLAGS when given, else the ones
# the model's family ships (`--shipped`: declared with the family, families/shipping.py; the points `make bench`'s
# sweep chose and their measurements are written beside each declaration).
stage_flags = $(if $($1),$($1),--shipped)
# A switch (DYNAMO, FP16, OV_INT8, SPEED, GENAI) is on when given and not 0: FP16=0 is FP16 off.
on = $(filter-out 0,$($1))
int8_flags = $(call stage_flags,INT8_FLAGS)
int4_flags = $(call stage_flags,INT4_FLAGS)
ov_int8_flags = $(call stage_flags,OV_INT8_FLAGS)
# Without OV_INT8 the ov-int8 stage runs for the families that ship it by default (the stage says so and exits 0).
ov_int8_where = $(if $(call on,OV_INT8),, --if-shipped)

.PHONY: install lock webgpu export package test lint fuzz bench bench-export bench-collection compare clean

install: $(STAMP) $(WEBGPU_STAMP)

# tools/webgpu-install.sh: never over the system's Mesa, never into .venv. Where it cannot install (not Debian 12
# x86_64, no registry) its one-line reason goes to .webgpu/unavailable, `make` goes on, and the WebGPU tests skip
# with that line.
webgpu: $(WEBGPU_STAMP)

$(WEBGPU_STAMP): tools/webgpu-install.sh
	@mkdir -p $(WEBGPU) && rm -f $(WEBGPU)/unavailable
	@bash tools/webgpu-install.sh $(WEBGPU) 2> $(WEBGPU)/install.err && touch $@ \
		|| { tail -n 1 $(WEBGPU)/install.err > $(WEBGPU)/unavailable; echo "WebGPU stack not installed: $$(cat $(WEBGPU)/unavailable)"; }

# pyproject.toml states compatible ranges; requirements.lock the exact set the suite ran, installed here as pip
# constraints (-c: every package pip installs takes the locked version). torch is the local CPU wheel (any other
# spec pulls CUDA), installed first so that transformers' torch requirement is already met.
LOCK := requirements.lock
$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c $(LOCK) torch==2.13.0
	$(PY) -m pip install -q -c $(LOCK) -e '.[export,dev,ray,genai,openvino]'
	@# The npu extra (onnxruntime-qnn: x86-64 manylinux_2_35 and Windows wheels only) on its own line: where it cannot
	@# be installed, the rest of the install stands and the NPU tests skip with the reason (docs/npu.md).
	$(PY) -m pip install -q -c $(LOCK) -e '.[npu]' || echo "onnxruntime-qnn not installed: the NPU tests will skip"
	touch $(STAMP)

# requirements.lock again: a fresh venv resolved from pyproject.toml's ranges (the newest versions the registry
# has), then `pip freeze`. Run `make test` on the result before committing it.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q torch==2.13.0
	.lock-venv/bin/pip install -q -e '.[export,dev,ray,genai,openvino]'
	.lock-venv/bin/pip install -q -e '.[npu]' || echo "onnxruntime-qnn not installed: not in the lock"
	{ echo "# The exact set \`make install\` and CI install (as pip constraints, -c): pip freeze of the .venv the suite ran in."; \
	  echo "# Remade by \`make lock\` (a fresh venv resolved from pyproject.toml's ranges, then pip freeze). Python 3.11, Linux x86-64."; \
	  .lock-venv/bin/pip freeze --exclude-editable; } > $(LOCK).tmp && mv $(LOCK).tmp $(LOCK) && rm -rf .lock-venv

# export -> surgery (the family's checks: Qwen3-VL debake + audit + claims, Phi-4-multimodal claims) -> optimize
# (the family's passes) -> int8, int4 (FP16=1: and fp16 and q4f16, docs/fp16.md), each stage into build/MODEL/<stage>/
# (model + self-contained report.json).
EXPORT_ARGS = $(if $(or $(MODEL_GIVEN),$(if $(CHECKPOINT),,x)),--model $(MODEL)) \
	$(if $(CHECKPOINT),--checkpoint $(CHECKPOINT)) $(if $(call on,DYNAMO),--dynamo)

export: $(STAMP)
ifneq ($(STATIC),)
	$(foreach s,$(subst $(comma), ,$(STATIC)),$(PY) -m builders.vision $(EXPORT_ARGS) --static $(s) \
		--out $(BUILD)/static-$(s)/export && \
		$(PY) -m quantize qnn $(BUILD)/static-$(s)/export $(BUILD)/static-$(s)/qnn && \
		$(PY) -m quantize fp16 $(BUILD)/static-$(s)/export $(BUILD)/static-$(s)/fp16 --outliers off &&) true
else ifeq ($(OPS),standard)
	$(PY) -m builders.vision $(EXPORT_ARGS) --ops standard --out $(BUILD)/standard
else
	$(PY) -m builders.vision $(EXPORT_ARGS) --out $(BUILD)/export
	$(PY) -m surgery stage $(BUILD)/export $(BUILD)/surgery
	$(PY) -m quantize optimize $(BUILD)/surgery $(BUILD)/optimized
	$(PY) -m quantize int8 $(BUILD)/optimized $(BUILD)/int8 $(int8_flags)
	$(PY) -m quantize int4 $(BUILD)/optimized $(BUILD)/int4 $(int4_flags)
	$(if $(call on,FP16),$(PY) -m quantize fp16 $(BUILD)/optimized $(BUILD)/fp16)
	$(if $(call on,FP16),$(PY) -m quantize q4f16 $(BUILD)/optimized $(BUILD)/q4f16)
	$(if $(filter 0,$(OV_INT8)),,$(PY) -m quantize ov-int8 $(BUILD)/optimized $(BUILD)/ov-int8 $(ov_int8_flags)$(ov_int8_where))
endif

# Release package from the stage folders of `make export`: dist/NAME/ (onnx/vision_encoder*.onnx, config.json,
# preprocessor_config.json, manifest.json, README.md, SHA256SUMS) and dist/NAME.tar.gz (reproducible);
# NAME is the export's model (qwen3-vl -> qwen3-vl-2b). SPEED=1 first times each variant for the model card.
# The build's static buckets (`make export STATIC=...`) ship beside the dynamic model: onnx/vision_encoder_static_WxH*.onnx.
# Check it with `python -m runtime verify dist/NAME`. GENAI=1 CHECKPOINT=DIR (the checkpoint `make export` read)
# also writes dist/MODEL-genai/, the folder onnxruntime-genai 0.18.0 loads (docs/genai.md).
package: $(STAMP)
	$(if $(call on,GENAI),$(if $(CHECKPOINT),,$(error GENAI=1 needs CHECKPOINT=DIR, the full checkpoint the export read (Qwen3-VL, Qwen2.5-VL or Qwen3.5))))
	$(if $(call on,SPEED),$(PY) -m release speed $(BUILD))
	$(PY) -m release package $(BUILD) --dist dist
	$(if $(call on,GENAI),$(PY) -m release genai $(BUILD) --checkpoint $(CHECKPOINT) --out dist/$(notdir $(BUILD))-genai)

# The suite on two pytest-xdist workers, each test file whole on one worker (its module fixtures made once), the
# files longest first (tests/conftest.py orders them by bench/results/test-durations.md; --no-loadscope-reorder keeps
# that order); the builds tests read come from tests/builds.py's cache (.cache/test-builds/: docs/architecture.md).
# PYTEST_ARGS: more pytest options (-k EXPR, --durations=0 for bench.suite_durations).
PYTEST_ARGS ?=
test: $(STAMP) $(WEBGPU_STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests $(PYTEST_ARGS)

# The fuzz harness (docs/errors.md, "Fuzzing"): seeds (tiny exports and packages, photos, configs, the real
# detectors) made once into build/fuzz/seeds, then FUZZ_CASES malformed inputs of FUZZ_SEED through every command,
# two at a time: bench/results/fuzz.md (every case: build/fuzz/results.json). Exit 1 on any finding.
FUZZ_SEED ?= 2026
FUZZ_CASES ?= 10000
fuzz: $(STAMP)
	test -d build/fuzz/seeds || $(PY) -m tools.fuzz seeds build/fuzz/seeds
	$(PY) -m tools.fuzz run --seeds build/fuzz/seeds --work build/fuzz/cases --seed $(FUZZ_SEED) \
		--cases $(FUZZ_CASES) --jobs 2 --json build/fuzz/results.json --markdown bench/results/fuzz.md

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The INT8/INT4 option sweep (latency, size, per-token cosine: bench/results/sweep.md), then latency of
# every stage against torch (needs `make export MODEL=...` first).
bench: $(STAMP)
	test -f $(BUILD)/export/model.onnx || $(MAKE) export MODEL=$(MODEL)
	$(PY) -m bench.sweep --model $(MODEL)
	$(PY) -m bench.latency --model $(MODEL)
	$(PY) -m bench.scale --model $(MODEL)

# Wall time and peak RSS of every stage of `make export` (both export paths, surgery, optimize, int8, int4, ov-int8
# where the family ships it), each in its own process, against the target of 4x the fp32 model, and ov-int8's wall
# time against the rest of `make export`: bench/results/export.md.
bench-export: $(STAMP)
	$(PY) -m bench.export_bench --model $(MODEL) $(if $(INT8_FLAGS),--int8-flags "$(INT8_FLAGS)") \
		$(if $(INT4_FLAGS),--int4-flags "$(INT4_FLAGS)")

# Throughput of `python -m runtime embed-collection` (images/s: --scheduler local with 1 and 2 threads, Ray with 1 and 2
# actors) and its peak memory at 200 and 2,000 inputs, on the package dist/NAME of `make package`:
# bench/results/collection.md. PACKAGE=dist/qwen3-vl-tiny for a quick run.
PACKAGE ?= dist/qwen3-vl-2b
bench-collection: $(STAMP)
	$(PY) -m bench.collection --package $(PACKAGE)

# Both pipelines side by side at published dims (export, graphs, sizes, parity, latency at 448x448 and 896x896):
# docs/comparison.md and docs/comparison.json. Exports what is missing first (minutes and ~8 GB each).
# The models: every family at published dims (`python -m bench.compare --list`, from the registry of families).
compare: $(STAMP)
	for m in $$($(PY) -m bench.compare --list); do \
		test -f build/$$m/int4/report.json || $(MAKE) export MODEL=$$m || exit 1; done
	$(PY) -m bench.compare

clean:
	rm -rf build dist
