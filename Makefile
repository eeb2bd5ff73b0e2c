# braid: the two commands of the README, and a few more.
#   make demo   build, launch 4 local ranks, run every collective with checking, print the table
#   make test   build and run the whole test suite (what CI runs)
#   make bench  build, then braid against Open MPI over shared memory, 2 ranks, 3 rounds (root;
#               ~10 minutes; the long forms are in docs/benchmarks.md)
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: all deps build demo test test-machines test-sanitize bench clean format

all: build

deps:
	@scripts/install_deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The kernel tests and collective sweeps at every ISA level and with a fake cache (CI runs it).
test-machines: build
	scripts/test_machines.sh $(BUILD)

bench: build
	bench/compare_shm.sh 3 256M 2

clean:
	rm -rf $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

# The fast sanitizer subsets CI runs after `make test` (scripts/sanitize.sh for the others).
test-sanitize: deps
	BRAID_SANITIZE_SUITES="unit transport" scripts/sanitize.sh address
	BRAID_SANITIZE_SUITES="unit transport" scripts/sanitize.sh thread
