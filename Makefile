# tensord: the two commands.
#   make run    install missing deps, build (Release), serve on 127.0.0.1:50051
#   make test   install missing deps, build, run every test (ctest)
#
# Knobs: BUILD_DIR, BUILD_TYPE (Release), TENSORD_CUDA (AUTO|ON|OFF),
# CUDA_ARCHS (e.g. 90; default: all cloud GPUs), JOBS, ARGS (extra tensord
# flags for `make run`, e.g. ARGS="--host-devices 2").

BUILD_DIR ?= build
BUILD_TYPE ?= Release
TENSORD_CUDA ?= AUTO
CUDA_ARCHS ?=
JOBS ?= $(shell nproc)
LISTEN ?= 127.0.0.1:50051
ARGS ?=

CMAKE_FLAGS := -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTENSORD_CUDA=$(TENSORD_CUDA)
ifneq ($(CUDA_ARCHS),)
CMAKE_FLAGS += -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS)
endif

.PHONY: deps configure build run test bench clean

deps:
	@bash deploy/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	$(BUILD_DIR)/server/tensord --listen $(LISTEN) $(ARGS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 300

bench: build
	$(BUILD_DIR)/bench/latency_bench

clean:
	rm -rf $(BUILD_DIR)
