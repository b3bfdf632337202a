# The README's two commands. Both fetch and build whatever is missing first.
#   make run    the main job on whatever adapter this machine has
#   make test   every test (ctest)
# DAWN=sid: Debian unstable's Dawn instead of the pinned npm one (README, "WebGPU runtimes"),
# in its own build folder
DAWN ?= npm
BUILD ?= $(if $(filter sid,$(DAWN)),build-sid,build)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
CMAKE_FLAGS += -DWGML_DAWN=$(DAWN)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ENV = . deps/$(if $(filter sid,$(DAWN)),env-sid.sh,env.sh) &&

.PHONY: run test deps build install sanitize clean fuzz

# make run: the adapter; a language model trained from scratch on a text file every Debian
# machine has; a LoRA adapter fine-tuned on a JSONL made from that text's section titles
# (scripts/license_sections.sh); the loss on that JSONL without and with the adapter; text
# generated with it. About three minutes on a 2-core CPU through lavapipe. Everything goes
# under RUN_OUT (replaced on each run). TRAIN_FLAGS / FINETUNE_FLAGS / GENERATE_FLAGS add
# options (e.g. TRAIN_FLAGS="--dim 512 --layers 8 --context 256 --steps 2000" on a big GPU).
RUN_OUT ?= out
TRAIN_FLAGS ?=
FINETUNE_FLAGS ?=
GENERATE_FLAGS ?=
RUN_PROMPT ?= GPL section 5:
run: build
	$(ENV) $(BUILD)/wgml info
	$(ENV) $(BUILD)/wgml train --out $(RUN_OUT) --overwrite $(TRAIN_FLAGS)
	sh scripts/license_sections.sh >$(RUN_OUT)/sections.jsonl
	$(ENV) $(BUILD)/wgml finetune --model $(RUN_OUT) --data $(RUN_OUT)/sections.jsonl --out $(RUN_OUT)/lora --overwrite \
	  --steps 150 --lr 1e-2 --val-fraction 0 $(FINETUNE_FLAGS)
	$(ENV) $(BUILD)/wgml eval --model $(RUN_OUT) --data $(RUN_OUT)/sections.jsonl
	$(ENV) $(BUILD)/wgml eval --model $(RUN_OUT) --adapter $(RUN_OUT)/lora --data $(RUN_OUT)/sections.jsonl
	$(ENV) $(BUILD)/wgml generate --model $(RUN_OUT) --adapter $(RUN_OUT)/lora --prompt "$(RUN_PROMPT) " --tokens 40 \
	  --temperature 0 $(GENERATE_FLAGS)

# TESTS: a ctest -R pattern (default: every test)
TESTS ?= .
test: build
	$(ENV) ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -R '$(TESTS)'

deps:
	@DAWN=$(DAWN) bash scripts/bootstrap.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

# The tests under AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer.
# SANITIZE_TESTS: a ctest -R pattern (default: every test).
SANITIZE_TESTS ?= .
sanitize: deps
	@cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DWGML_SANITIZE=ON >/dev/null
	@cmake --build build-sanitize -j $(JOBS)
	$(ENV) ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-sanitize --output-on-failure -j $(JOBS) -R '$(SANITIZE_TESTS)'

clean:
	rm -rf $(BUILD) build-sanitize

# The parsers of untrusted files (src/io/) under libFuzzer, ASan and UBSan: builds
# tests/fuzz alone into build-fuzz with clang (needs clang and libclang-rt-14-dev; no WebGPU
# runtime), then runs each target for FUZZ_TIME seconds from its seed corpus, keeping what
# it finds in build-fuzz/corpus/<target> and crashes in build-fuzz/crash-*.
FUZZ_TIME ?= 20
FUZZ_TARGETS = safetensors config index tokenizer encode gguf
fuzz:
	@bash scripts/bootstrap.sh --fuzz
	@cmake -S tests/fuzz -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@for t in $(FUZZ_TARGETS); do mkdir -p build-fuzz/corpus/$$t; \
	  build-fuzz/fuzz_$$t -max_total_time=$(FUZZ_TIME) -max_len=65536 -timeout=10 -dict=tests/fuzz/json.dict \
	    -artifact_prefix=build-fuzz/ build-fuzz/corpus/$$t tests/fuzz/corpus/$$t || exit 1; done
