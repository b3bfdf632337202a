# The README's two commands. Both fetch and build whatever is missing first.
#   make run    the main job on whatever adapter this machine has
#   make test   every test (ctest)
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ENV = . deps/env.sh &&

.PHONY: run test deps build install sanitize clean

run: build
	$(ENV) $(BUILD)/wgml info

test: build
	$(ENV) ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

deps:
	@bash scripts/bootstrap.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

# The tests under AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer.
sanitize: deps
	@cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DWGML_SANITIZE=ON >/dev/null
	@cmake --build build-sanitize -j $(JOBS)
	$(ENV) ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-sanitize --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) build-sanitize
