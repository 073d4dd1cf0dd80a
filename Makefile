# kplane: one static binary, thousands of Kubernetes control planes.

GO          ?= go
PYTHON      ?= python3
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
K8S_VERSION := $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes 2>/dev/null)
K8S_MINOR   := $(word 2,$(subst ., ,$(K8S_VERSION)))
BUILD_DATE  := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
DATA_DIR    ?= $(CURDIR)/.data
# The -X flags make /version (and kubectl version) report the Kubernetes
# release the planes serve.
LDFLAGS := -s -w \
	-X kplane.dev/kplane/server/version.Version=$(VERSION) \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(K8S_MINOR) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/component-base/version.buildDate=$(BUILD_DATE)

export CGO_ENABLED = 0

.PHONY: all build run fmt-check test test-unit test-e2e test-sdk test-go-sdk envtest-assets sdk-spec bench bench-quick vet clean release conformance image

all: build

## build: bin/kplane, one static binary
build: bin/kplane

## run: build and run a server with its data in ./.data
run: build
	bin/kplane server --data-dir $(DATA_DIR)

## test: the whole suite (unit + end-to-end against bin/kplane, then the Go and Python SDKs')
# A failure is repeated at the end of the output with its first lines
# (scripts/test-failures): the log of a failed run is long.
GO_TEST_LOG := $(CURDIR)/bin/go-test.log
test: fmt-check build envtest-assets
	@rm -f $(GO_TEST_LOG).failed
	{ KPLANE_BINARY=$(CURDIR)/bin/kplane $(GO) test -p 2 -timeout 25m ./... 2>&1 || touch $(GO_TEST_LOG).failed; } | tee $(GO_TEST_LOG)
	@if [ -f $(GO_TEST_LOG).failed ]; then scripts/test-failures $(GO_TEST_LOG); exit 1; fi
	$(MAKE) --no-print-directory test-go-sdk
	KPLANE_BINARY=$(CURDIR)/bin/kplane $(PYTHON) -m unittest discover -s sdk/python/tests -t sdk/python/tests

# The example operator's suite runs every case at once on kplane, and again
# on controller-runtime's envtest with the binaries of envtest-assets (it
# fails rather than skips without them).
EXAMPLE_PARALLEL ?= 64
ENVTEST_ASSETS   := $(CURDIR)/bin/envtest
# No commit or date in them: the link is cached across commits.
ENVTEST_LDFLAGS  := -s -w -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(K8S_MINOR)

## test-go-sdk: the Go SDK's tests (sdk/go, its own module) and the example operator's suite (examples/rayserve-operator)
test-go-sdk: build envtest-assets
	cd sdk/go && KPLANE_BINARY=$(CURDIR)/bin/kplane $(GO) test -timeout 10m ./...
	cd examples/rayserve-operator && KPLANE_BINARY=$(CURDIR)/bin/kplane KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) \
		RAYSERVE_REQUIRE_ENVTEST=1 $(GO) test -timeout 15m -parallel $(EXAMPLE_PARALLEL) ./...

## envtest-assets: kube-apiserver and etcd for controller-runtime's envtest in bin/envtest
## (KUBEBUILDER_ASSETS), built from the Kubernetes and etcd modules of go.mod: no download
envtest-assets:
	@mkdir -p $(ENVTEST_ASSETS)
	$(GO) build -ldflags '$(ENVTEST_LDFLAGS)' -o $(ENVTEST_ASSETS)/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
	$(GO) build -ldflags '-s -w' -o $(ENVTEST_ASSETS)/etcd ./test/e2e/etcdserver

## test-unit: unit tests only (not the e2e suite, nor the bench harness's run of bin/kplane)
test-unit:
	$(GO) test -p 2 -timeout 10m -skip '^TestQuickBench$$' $$($(GO) list ./... | grep -v /test/e2e)

## test-e2e: end-to-end tests only
test-e2e: build
	KPLANE_BINARY=$(CURDIR)/bin/kplane $(GO) test -p 2 -timeout 25m -v ./test/e2e/...

## conformance: the upstream sig-api-machinery [Conformance] e2e specs against one
## plane, one process and timeout per spec; table in bin/conformance/results/results.md
## (not part of test; CONFORMANCE_ALLOW_FAILURES=1 exits 0 despite failures)
conformance: build
	KPLANE_BINARY=$(CURDIR)/bin/kplane GO=$(GO) scripts/conformance.sh

# The container image (Containerfile), tagged with the version; podman or
# docker, whichever is installed (CONTAINER_RUNTIME=docker chooses).
IMAGE       ?= kplane
IMAGE_TAG   ?= $(subst +,-,$(VERSION))
HOST_GOOS   := $(shell $(GO) env GOOS)
HOST_GOARCH := $(shell $(GO) env GOARCH)
# The binary the image holds: bin/kplane on Linux, a Linux build elsewhere.
IMAGE_BINARY ?= $(if $(filter linux,$(HOST_GOOS)),bin/kplane,bin/kplane-linux-$(HOST_GOARCH))

## image: the container image kplane:<version> for this machine's architecture
image: $(IMAGE_BINARY)
	scripts/image.sh build $(IMAGE):$(IMAGE_TAG) $(HOST_GOARCH) $(IMAGE_BINARY)

bin/kplane-linux-%: FORCE
	GOOS=linux GOARCH=$* $(GO) build -ldflags '$(LDFLAGS)' -o $@ .

bin/kplane: FORCE
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/kplane .

FORCE:

## release: static binaries for every released platform, the container image for
## linux/amd64 and linux/arm64 (archives), sha256 sums and the systemd unit in dist/
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
IMAGE_PLATFORMS   ?= linux/amd64 linux/arm64
release:
	rm -rf dist && mkdir -p dist
	set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		echo "building kplane-$$os-$$arch"; \
		GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/kplane-$$os-$$arch . ; \
	done
	set -e; for p in $(IMAGE_PLATFORMS); do \
		arch=$${p#*/}; \
		scripts/image.sh save $(IMAGE):$(IMAGE_TAG)-$$arch $$arch dist/kplane-linux-$$arch dist/kplane-image-linux-$$arch.tar; \
	done
	cp install.sh scripts/kplane.service dist/
	cd dist && sha256sum kplane-* install.sh kplane.service > sha256sums.txt
	cat dist/sha256sums.txt

# Scenarios of `make bench`; BENCH_FLAGS adds flags, e.g. --max 1000.
BENCH_SCENARIOS ?= curve,requests,watch,fleet,snapshot,streams,scenarios,plain-planes,quota,services,baseline
BENCH_FLAGS     ?=

## bench: kplane against one kube-apiserver per plane on this machine:
## bench/results.json, bench/results.md and bench/*.png (takes a while)
bench: build
	$(GO) run ./scripts/bench --binary bin/kplane --scenarios $(BENCH_SCENARIOS) --out bench/results.json $(BENCH_FLAGS)

## bench-quick: the same with tiny counts (a smoke test, about a minute), into bench/quick/
bench-quick: build
	$(GO) run ./scripts/bench --binary bin/kplane --quick --scenarios $(BENCH_SCENARIOS) --out bench/quick/results.json $(BENCH_FLAGS)

## test-sdk: the Python SDK's tests (they start bin/kplane)
test-sdk: build
	KPLANE_BINARY=$(CURDIR)/bin/kplane $(PYTHON) -m unittest discover -s sdk/python/tests -t sdk/python/tests

## sdk-spec: copy manifests/openapi/kplane.v1.yaml (and its JSON form) into the Python SDK
sdk-spec:
	KPLANE_UPDATE_SDK_SPEC=1 $(GO) test -count=1 -run TestSDKShipsTheContract ./manifests/

vet:
	$(GO) vet ./...

## fmt-check: fails when gofmt would change a tracked Go file
fmt-check:
	@out=$$($$($(GO) env GOROOT)/bin/gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# bench/ holds measured figures and is kept.
clean:
	rm -rf bin dist
