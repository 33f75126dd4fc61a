# informerd — the two commands a fresh machine needs: `make run` and `make test`.
# Every target first runs tools/bootstrap, which installs what is missing and is quiet otherwise.

SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)
BAZEL ?= bazel
# C++ targets also run under these sanitizers in `make test` (kept off the benchmarks): all of
# them under ASan, and under TSan all but the tests tagged "notsan" (single-threaded code: a
# parser, a selector, a codec; nothing for TSan to see), which it does not even build.
SANITIZED_TARGETS ?= //base/... //server/... //client/...
# Every Go module in the repository (each directory with a go.mod) is vetted and tested (one
# that only pins tools, testing/helm, has no packages to vet).
GO_MODULES := $(patsubst %/go.mod,%,$(wildcard testing/*/go.mod bench/baseline/go.mod))

.PHONY: bootstrap run example image test-image chart test-chart test test-cc test-sanitizers test-thread-safety test-smoke test-go test-proto test-monitoring test-python test-rust bench-workqueue bench-watch fuzz test-fuzz fake-apiserver clean

bootstrap:
	@tools/bootstrap

run: bootstrap
	@tools/run

# With `make run` going in another shell: the Python SDK's example controller on its demo namespace.
example: bootstrap
	@tools/run_example

# The suites of `make test`, in order; tools/test_suites prints each one's time at the end.
TEST_SUITES := test-cc test-sanitizers test-thread-safety test-go test-fuzz test-smoke test-image test-chart test-proto test-monitoring test-python test-rust

test: bootstrap
	@tools/test_suites $(TEST_SUITES)

test-cc:
	$(BAZEL) test //...

test-sanitizers:
	$(BAZEL) test --config=asan $(SANITIZED_TARGETS)
	$(BAZEL) test --config=tsan --build_tests_only --test_tag_filters=-notsan $(SANITIZED_TARGETS)

# The lock contracts (ABSL_GUARDED_BY and friends) checked by clang -Wthread-safety -Werror
# over every C++ source (Bazel's toolchain is gcc, which ignores them).
test-thread-safety:
	tools/check_thread_safety

# The daemon as users meet it: grpcurl through reflection against informerd + the fake API server.
test-smoke:
	tools/smoke_grpcurl

# The API: buf lint (proto/buf.yaml) and buf breaking against the API before issue 9 (e355eab).
# The daemon's OCI image (out/image: an OCI layout and a docker-archive), built with umoci and
# skopeo, no container engine; test-image validates it and runs it read-only as non-root.
image: bootstrap
	tools/image

test-image:
	tools/image
	tools/check_image

test-proto:
	tools/check_proto

# deploy/helm/informerd (helm built from its Go module, testing/helm): helm lint --strict with
# the defaults and every ci/*-values.yaml, and the plain manifests of deploy/ rendered from it.
# test-chart also checks that deploy/ is what the chart renders and that the daemon accepts the
# config.yaml of every values file (informerd --check-config); test-go's TestChart applies each
# rendering with kubectl apply --dry-run=server on the real kube-apiserver.
chart: bootstrap
	tools/chart

test-chart:
	tools/chart --check

# deploy/helm/informerd/files: promtool check and test the alert rules; the dashboard's queries parse.
test-monitoring:
	tools/check_monitoring

# sdk/python: stubs in step with proto/, ruff, mypy --strict, a wheel, pytest on real processes.
test-python:
	tools/test_python

# sdk/rust: cargo fmt, clippy and rustdoc with warnings as errors, cargo test (unit, doc, and
# integration tests on real processes).
test-rust:
	tools/test_rust

# helm and the Prometheus Operator's CRDs (testing/helm) are built first, outside go test's
# 10-minute limit for testing/kube's e2e package, which uses them (TestChart).
test-go:
	@testing/helm/helm --build-only >/dev/null && testing/helm/prometheus-operator-crds >/dev/null
	@set -e; for m in $(GO_MODULES); do \
	  if [ -z "$$(cd $$m && go list ./... 2>/dev/null)" ]; then echo "go: $$m has no packages (its go.mod pins tools, which its scripts build)"; continue; fi; \
	  echo "go vet + go test: $$m"; \
	  (cd $$m && go vet ./... && go test -count=1 ./...); \
	done

# The libFuzzer targets (clang; client/'s parsers, server/service's requests): briefly in
# `make test`, longer in `make fuzz`.
test-fuzz:
	FUZZ_SECONDS=$${FUZZ_SECONDS:-20} tools/fuzz

fuzz: bootstrap
	tools/fuzz $${FUZZ_SECONDS:-600}

bench-workqueue: bootstrap
	tools/bench_workqueue

# Watch decoding: informerd vs client-go's watch decoder vs a bare simdjson parse (client/).
bench-watch: bootstrap
	tools/bench_watch

# The fake Kubernetes API server used by tests and benchmarks (testing/apiserver).
fake-apiserver:
	@mkdir -p out
	cd testing/apiserver && go build -o ../../out/fake-apiserver ./cmd/fake-apiserver

clean:
	$(BAZEL) clean

# Real kube-apiserver + embedded etcd for integration tests (see testing/kube/README.md).
.PHONY: kube-testserver kubectl
kube-testserver:
	testing/kube/start --build-only

# The real kubectl of the same release, into out/kubectl (testing/kube/kubectl runs it; the
# deploy/ manifests are checked with it in `make test`).
kubectl:
	testing/kube/kubectl --build-only

# Long randomized convergence of informers against testing/apiserver under random faults
# (`make test` runs a short version). SOAK_ROUNDS / SOAK_OPS / SOAK_SEED tune it.
SOAK_ROUNDS ?= 1500
SOAK_OPS ?= 60
# Then the churn of informers, queues and streams against a real daemon (server/lifetime_test.cc):
# RSS, threads and /metrics series must stay flat. SOAK_CHURN_ROUNDS / SOAK_CHURN_SCALE tune it.
SOAK_CHURN_ROUNDS ?= 200
SOAK_CHURN_SCALE ?= 5
.PHONY: soak
soak: bootstrap
	$(BAZEL) test //server/informer:convergence_test --test_output=streamed --test_timeout=14400 \
	  --test_env=INFORMERD_CONVERGENCE_ROUNDS=$(SOAK_ROUNDS) --test_env=INFORMERD_CONVERGENCE_OPS=$(SOAK_OPS) \
	  $(if $(SOAK_SEED),--test_env=INFORMERD_CONVERGENCE_SEED=$(SOAK_SEED),) --nocache_test_results
	$(BAZEL) test //server:lifetime_test --test_filter='LifetimeTest.Churn*' --test_output=streamed \
	  --test_timeout=14400 --test_env=INFORMERD_CHURN_ROUNDS=$(SOAK_CHURN_ROUNDS) \
	  --test_env=INFORMERD_CHURN_SCALE=$(SOAK_CHURN_SCALE) --nocache_test_results

# The long chaos run (tools/chaos): a replica set on the real kube-apiserver under
# SIGKILL/SIGSTOP/SIGTERM of its leader and an API server outage, CHAOS_KILLS (20) kills with
# client-go's timings (out/chaos-failover.json), then the randomized nemesis for MINUTES (30)
# from SEED (27; a failing seed replays), its schedule and oracle in out/chaos-nemesis.json.
# `make test` runs a short version (sdk/python/tests/test_chaos.py: 2 minutes of seed 27).
SEED ?= 27
MINUTES ?= 30
.PHONY: chaos
chaos: bootstrap
	CHAOS_SEED=$(SEED) CHAOS_MINUTES=$(MINUTES) tools/chaos

# Informer benchmarks beside client-go (tools/bench_informer): prints the table and writes
# bench/results/informer.json.
.PHONY: bench-informer
bench-informer: bootstrap
	tools/bench_informer

# informerd's gRPC service under bench/load beside bare-gRPC floors (tools/bench_service): prints the
# table and writes bench/results/service.json.
.PHONY: bench-service
bench-service: bootstrap
	tools/bench_service

# The Python SDK beside bare grpcio floors, kopf and the official kubernetes client
# (tools/bench_sdk, bench/sdk/README.md): prints the table and writes bench/results/sdk.json.
# BENCH_SDK_ARGS passes sizes and durations to bench/sdk/run.py (see its --help).
.PHONY: bench-sdk
bench-sdk: bootstrap
	tools/bench_sdk $(BENCH_SDK_ARGS)
