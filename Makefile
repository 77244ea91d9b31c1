# Two commands take a fresh clone to a running demo and a passing test suite:
#   make demo   set up, build, and run the demo job on this machine
#   make test   set up, build, and run the unit, cluster and e2e tests
SHELL := /bin/bash
PRESET ?= default
CTEST_ARGS ?=

.PHONY: all setup build test test-unit test-cluster test-e2e demo format format-check clean cluster-up cluster-down

all: build

setup:
	scripts/setup.sh

build: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET)

test: build
	ctest --preset $(PRESET) -L 'unit|cluster|e2e' $(CTEST_ARGS)

test-unit: build
	ctest --preset $(PRESET) -L unit $(CTEST_ARGS)

test-cluster: build
	ctest --preset $(PRESET) -L cluster $(CTEST_ARGS)

test-e2e: build
	ctest --preset $(PRESET) -L e2e $(CTEST_ARGS)

demo: build
	scripts/demo.sh

cluster-up: setup
	scripts/cluster.sh up

cluster-down:
	scripts/cluster.sh down

format:
	git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

format-check:
	git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run -Werror

clean:
	rm -rf build build-debug
