# tensord: the two commands.
#   make run    install missing deps, build (Release), serve on 127.0.0.1:50051
#   make test   install missing deps, build, run every test (ctest)
#   make test-asan / test-tsan / fuzz   the proof builds CI runs after `make test`:
#               the suite under ASan+UBSan, the core concurrency tests under
#               TSan, and the libFuzzer targets for FUZZ_SECONDS each
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

.PHONY: deps configure build run test bench clean test-asan test-tsan fuzz fuzz-corpus

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

# --- Proof (issue 5): sanitizers and fuzzing, each in its own build dir ----
ASAN_BUILD_DIR ?= build-asan
TSAN_BUILD_DIR ?= build-tsan
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 15
SAN_CMAKE_FLAGS := -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTENSORD_CUDA=OFF
# Each also needs tests/stress/CMakeLists.txt's absl::Mutex annotations.
TSAN_TESTS := core_concurrency_test core_runtime_test core_handle_table_test core_lease_test \
  core_stream_lease_test

# The whole suite under AddressSanitizer (+ LeakSanitizer) and UBSan.
test-asan: deps
	cmake -S . -B $(ASAN_BUILD_DIR) $(SAN_CMAKE_FLAGS) \
	  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer"
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600 -LE long

# The runtime and handle-table concurrency tests under ThreadSanitizer (core
# only: Debian's gRPC is not TSan-instrumented). OpenBLAS's own threads are
# not instrumented either, so it runs single-threaded here, and so does
# oneDNN's OpenMP team (libgomp is not instrumented).
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD_DIR) $(SAN_CMAKE_FLAGS) \
	  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
	  -DCMAKE_C_FLAGS="-fsanitize=thread -fno-omit-frame-pointer"
	cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target $(TSAN_TESTS)
	set -e; for t in $(TSAN_TESTS); do \
	  echo "== tsan: $$t"; \
	  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
	  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	    $(TSAN_BUILD_DIR)/tests/*/$$t --gtest_brief=1; \
	done

# libFuzzer targets (clang): every RPC for FUZZ_SECONDS from its seed corpus.
FUZZ_CMAKE_FLAGS := $(SAN_CMAKE_FLAGS) -DTENSORD_FUZZ=ON \
	-DTENSORD_BUILD_EXAMPLES=OFF -DTENSORD_BUILD_BENCH=OFF \
	-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	-DCMAKE_CXX_FLAGS="-O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	-DCMAKE_C_FLAGS="-O1 -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer"
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD_DIR) $(FUZZ_CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target tensord_service_fuzzer
	tests/fuzz/run.sh $(FUZZ_BUILD_DIR)/tests/fuzz/tensord_service_fuzzer $(FUZZ_SECONDS)

# Rewrites the committed seed corpus (tests/fuzz/corpus) from make_corpus.cc.
fuzz-corpus: deps
	cmake -S . -B $(FUZZ_BUILD_DIR) $(FUZZ_CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target tensord_fuzz_make_corpus
	rm -rf tests/fuzz/corpus
	$(FUZZ_BUILD_DIR)/tests/fuzz/tensord_fuzz_make_corpus tests/fuzz/corpus

bench: build
	$(BUILD_DIR)/bench/tensord-bench

clean:
	rm -rf $(BUILD_DIR)
