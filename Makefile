# fabric_exporter — `make test` is the test command CI runs (.ci/run).
GO        ?= go
BIN       ?= fabric_exporter
ANALYZE_BIN ?= fabric_analyze
PKG       := github.com/fabric-exporter/fabric_exporter
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/prometheus/common/version.Version=$(VERSION) \
             -X github.com/prometheus/common/version.Revision=$(REVISION) \
             -X github.com/prometheus/common/version.Branch=$(BRANCH) \
             -X github.com/prometheus/common/version.BuildUser=$(shell whoami)@$(shell hostname) \
             -X github.com/prometheus/common/version.BuildDate=$(shell date -u +%Y%m%d-%H:%M:%S)
# -s -w: no symbol table and no DWARF debug information in the binaries
# (exporter: 28.3 MB with both, 22.3 MB with -w, 19.8 MB with -s -w, as of the
# kubernetes/phy collectors; docs/benchmarks.md). Stack traces, pprof and
# `go version -m` read the runtime's own tables and do not need either; a
# debugger and `go tool nm` do: `make build STRIP=`.
STRIP     ?= -s -w
FUZZTIME  ?= 30s
# go-nvml's header marks many NVML calls deprecated; silence gcc about it.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
PROMTOOL  ?= promtool
DEMO_ADDR ?= :10470
# govulncheck, pinned; `make vulncheck` installs it into build/tools.
GOVULNCHECK_VERSION ?= v1.9.0
# The vulnerability database: $GOVULNDB when set (a URL or a directory),
# else the dated snapshot next to the clone (../shared/govulndb, see its
# README), else govulncheck's default, the online vuln.go.dev.
GOVULNDB  ?=
SNAPSHOT_DB ?= ../shared/govulndb/govulndb.tar.gz

.PHONY: help all build build-analyze vulncheck test test-scaleout helm test-helm bench-fleet vet fmt nogpu checkmetrics run demo bench bench-nccl fuzz fixtures rules update-golden dashboards analyze-example clean

# `make` alone lists the targets: `make help`.
.DEFAULT_GOAL := help

# Every target with the line after its "## "; TestMakefileHelp checks that
# each phony target has one.
help: ## list the targets (what `make` alone does)
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z_-]+:.*## / { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

all: test build build-analyze ## test, then build both binaries

# The exporter. It links no plotting code: the benchmark analysis is its
# own binary (build-analyze).
build: ## build ./fabric_exporter (cgo; STRIP= keeps symbols)
	$(GO) build -ldflags '$(STRIP) $(LDFLAGS)' -o $(BIN) ./cmd/fabric_exporter

# fabric_analyze, the benchmark sweep analysis (docs/analysis.md).
build-analyze: ## build ./fabric_analyze, the benchmark sweep analysis
	$(GO) build -ldflags '$(STRIP) $(LDFLAGS)' -o $(ANALYZE_BIN) ./cmd/fabric_analyze

# govulncheck on every package (exporter, analysis, tools) and the Go
# standard library it was built with; fails (exit 3) on any vulnerability
# that the code calls. Database: see GOVULNDB above.
vulncheck: ## govulncheck (pinned) on every package; fails on a called vulnerability
	GOBIN=$(CURDIR)/build/tools $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)
	@set -e; db="$(GOVULNDB)"; \
	if [ -z "$$db" ] && [ -f "$(SNAPSHOT_DB)" ]; then \
	  rm -rf build/govulndb && mkdir -p build/govulndb && tar -C build/govulndb -xzf "$(SNAPSHOT_DB)"; \
	  db="$(CURDIR)/build/govulndb/govulndb"; \
	  echo "vulncheck: database snapshot $(SNAPSHOT_DB) ($$(cat $$db/index/db.json))"; \
	fi; \
	case "$$db" in /*) db="file://$$db" ;; esac; \
	echo "vulncheck: database $${db:-https://vuln.go.dev (online)}"; \
	build/tools/govulncheck $${db:+-db "$$db"} ./...

# Everything CI checks: formatting, vet, unit + fault + golden end-to-end
# tests (with the race detector), fuzz seed corpora, promtool on the golden file.
test: fmt vet nogpu ## what CI runs: gofmt, vet, the no-cgo build, go test -race ./..., promtool
	$(GO) test -race -count=1 ./...
	$(MAKE) checkmetrics

# The scale-out paths: VictoriaMetrics (deploy/victoriametrics/README.md),
# vmagent and vmalert, pinned, installed from the Go module proxy into
# build/tools (a few minutes the first time, cached after), then the test
# that runs the shipped rules there (e2e/scaleout_test.go); then Thanos
# (deploy/thanos/README.md, e2e/thanos_test.go, 3 to 4 minutes). .ci/run
# runs it.
VM_VERSION ?= v1.151.0
VM_BIN_DIR := $(CURDIR)/build/tools/victoriametrics-$(VM_VERSION)
# Thanos (deploy/thanos/README.md): its go.mod has replace directives, so
# `go install` refuses it; the module is downloaded, copied out of the
# module cache, made writable and built there, once (the binary is kept
# under build/tools while it is THANOS_VERSION). v0.39 and later need a
# module the proxy here refuses. Then e2e/thanos_test.go.
THANOS_VERSION ?= v0.36.0
THANOS := $(CURDIR)/build/tools/thanos-$(THANOS_VERSION)
test-scaleout: ## VictoriaMetrics, then Prometheus shards with Thanos, on the shipped rules (many minutes)
	GOBIN=$(VM_BIN_DIR) GOFLAGS=-mod=mod $(GO) install \
	  github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@$(VM_VERSION) \
	  github.com/VictoriaMetrics/VictoriaMetrics/app/vmagent@$(VM_VERSION) \
	  github.com/VictoriaMetrics/VictoriaMetrics/app/vmalert@$(VM_VERSION)
	VM_BIN_DIR=$(VM_BIN_DIR) $(GO) test -tags scaleout -count=1 -v -run '^TestScaleOutVictoriaMetrics$$' ./e2e
	@if [ ! -x $(THANOS) ]; then \
	  echo "building thanos $(THANOS_VERSION) into build/tools (many minutes on two cores, once)"; \
	  set -e; dir=$$(GOFLAGS=-mod=mod $(GO) mod download -json github.com/thanos-io/thanos@$(THANOS_VERSION) | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'); \
	  src=$(CURDIR)/build/thanos-src-$(THANOS_VERSION); rm -rf $$src; cp -r "$$dir" $$src; chmod -R u+w $$src; \
	  (cd $$src && $(GO) build -buildvcs=false -o $(THANOS).tmp ./cmd/thanos); mv $(THANOS).tmp $(THANOS); rm -rf $$src; \
	fi
	THANOS_BIN=$(THANOS) $(GO) test -tags scaleout -count=1 -v -run '^TestScaleOutThanos$$' ./e2e

# The Helm chart (deploy/helm/fabric-exporter): helm, pinned, installed from
# the Go module proxy into build/tools (about 1.5 minutes on two cores the
# first time; kept while it is HELM_VERSION), then the chart's tests: helm
# lint, helm template against kubectl kustomize of deploy/kubernetes (with and
# without the pod-resources component), the rule file, the dashboards, the
# values. make test skips them where helm is not installed; .ci/run runs this.
HELM_VERSION ?= v3.22.0
HELM := $(CURDIR)/build/tools/helm
helm: ## install Helm (pinned) into build/tools
	@if ! $(GO) version -m $(HELM) 2>/dev/null | grep -q 'mod[[:space:]]*helm.sh/helm/v3[[:space:]]*$(HELM_VERSION)[[:space:]]'; then \
	  echo "installing helm $(HELM_VERSION) into build/tools"; \
	  GOBIN=$(CURDIR)/build/tools $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); \
	fi

test-helm: helm ## the Helm chart's tests (lint, template against the kustomize base)
	HELM=$(HELM) $(GO) test -count=1 -v ./deploy/helm/...

# The fleet benchmark (docs/benchmarks.md, "Fleet scale"): a real Prometheus
# with the shipped rules and N simulated nodes; minutes per N.
FLEET_NODES ?= 50,500,1000
bench-fleet: ## the fleet benchmark: real Prometheus, the rules, FLEET_NODES simulated nodes
	$(GO) run ./tools/fleetbench -nodes $(FLEET_NODES)

# The build without GPU support (no cgo) must keep compiling.
nogpu: ## build without cgo (no GPU support) and vet with -tags nogpu
	CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/fabric_exporter
	$(GO) vet -tags nogpu ./...

vet: ## go vet ./...
	$(GO) vet ./...

fmt: ## fail when a Go file needs gofmt
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

checkmetrics: ## promtool check metrics on the golden scrape
	$(PROMTOOL) check metrics < collector/fixtures/e2e-output.txt

# Build and run the exporter on this host, quietly: the build prints nothing
# (CGO_CFLAGS above silences go-nvml's deprecation warnings, which a plain
# `go run ./cmd/fabric_exporter` shows on its first build), then only the
# exporter's log lines. Flags: make run ARGS='--rail=rail0=mlx5_0:1'.
run: ## build and run the exporter on this host (flags: ARGS='…')
	@$(GO) build -ldflags '$(STRIP) $(LDFLAGS)' -o $(BIN) ./cmd/fabric_exporter
	@exec ./$(BIN) $(ARGS)

# Run the exporter on the bundled fixture trees, no RDMA hardware or GPU
# needed: tools/demo prints the exporter's command line (the fixtures, real
# NCCL logs, the Inspector dumps of both modes), serves NCCL's RAS service
# (two recorded answers) and the kubelet's pod-resources API, and stops them
# when the exporter stops. Then open http://localhost:10470/metrics. Exporter
# flags: make demo ARGS='--log.level=debug'. What it shows and what it
# cannot: README.md (TestDemoFamilies checks it).
demo: build ## run the exporter on the fixtures with RAS and kubelet stand-ins (http://localhost:10470/metrics)
	@$(GO) build -o build/fabric_demo ./tools/demo
	@exec build/fabric_demo -exporter ./$(BIN) -listen $(DEMO_ADDR) -dir build/demo -- $(ARGS)

# Re-render alerts/fabric-rules.yml (alerts/rules/*.yml.tmpl, alerts/config.yml)
# and alerts/dcgm-compat-rules.yml, then the Kubernetes PrometheusRule from
# alerts/fabric-rules.yml, then the Helm chart's copy of it (and of the
# dashboards). The tests only check that these are up to date.
rules: ## re-render the rule files, the PrometheusRule and the Helm chart copies
	$(GO) run ./alerts/gen -dir alerts
	$(GO) run ./deploy/kubernetes/gen
	$(GO) run ./deploy/helm/gen

update-golden: ## rewrite the golden scrape collector/fixtures/e2e-output.txt
	$(GO) test ./cmd/fabric_exporter -run TestEndToEnd -update

fixtures: ## rebuild the sysfs, /proc and topology fixture trees, then the golden scrape
	bash collector/fixtures/build-sys.sh
	bash collector/fixtures/build-proc.sh
	bash collector/fixtures/topo/build-topo.sh
	$(MAKE) update-golden

# Grafana dashboards: rewrite dashboards/json/*.json from dashboards/*.go,
# then the Helm chart's copies (and its copy of the rule file).
dashboards: ## re-render the Grafana dashboards and the Helm chart copies
	$(GO) run ./dashboards/gen -out dashboards/json
	$(GO) run ./deploy/helm/gen

# The worked example of `fabric_analyze` in docs/analysis.md (docs/analyze/):
# the analysis of the synthetic sweep served by a real Prometheus
# (needs Debian's prometheus package).
analyze-example: ## rerun docs/analysis.md's example against Debian's Prometheus
	$(GO) test ./analyze -run '^TestRealPrometheusSweep$$' -count=1 -args -docs

# In-process benchmarks (go test -bench) and the side-by-side run against
# node_exporter and the raw open/read/close floor (results: docs/benchmarks.md).
bench: build ## go test -bench and tools/scrapebench against node_exporter
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./tools/scrapebench -fabric ./$(BIN)

# NCCL log parsing against grep -c 'NCCL INFO' on a 1 GiB log assembled from
# the real sample logs in .bench/ (deleted afterwards; results:
# docs/benchmarks.md, "NCCL log parsing").
bench-nccl: ## NCCL log parsing against grep on a 1 GiB log
	$(GO) run ./tools/ncclbench -runs 5

fuzz: ## every fuzz target for FUZZTIME (30s) each (tools/fuzz/run.sh)
	GO=$(GO) FUZZTIME=$(FUZZTIME) tools/fuzz/run.sh

clean: ## remove the binaries and the demo directory
	rm -f $(BIN) $(ANALYZE_BIN)
	rm -rf build/demo build/fabric_demo
