# fabric_exporter container image. Build it with BuildKit (the default
# builder since Docker 23; DOCKER_BUILDKIT=1 before): the legacy builder
# drops the binary's file capabilities in COPY --from.
#
#   docker build -t fabric_exporter .
#   docker run -d --name fabric_exporter --network host --pid host --read-only \
#     --cap-drop ALL --cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH \
#     --security-opt no-new-privileges \
#     -v /sys:/host/sys:ro -v /proc:/host/proc:ro -v /:/host/root:ro,rslave \
#     fabric_exporter
#
# (add `--runtime nvidia` or `--gpus all` for the gpu collector; docs/install.md,
# "Docker"). The image carries the exporter only: the benchmark analysis,
# fabric_analyze, runs wherever Prometheus is reachable (make build-analyze)
# and keeps its plotting libraries out of this privileged image. Both base images are build arguments so that a mirror or a
# locally built stand-in can replace them (deploy/docker/test-image.sh does).
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
ARG GOPROXY=https://proxy.golang.org,direct
ARG GOSUMDB=sum.golang.org
ARG VERSION=dev
ARG REVISION=unknown
ARG BRANCH=unknown
ARG BUILD_USER=docker
ARG BUILD_DATE=unknown
# cgo: the GPU libraries (go-nvml, go-dcgm) need it; their headers mark many
# NVML calls deprecated, so gcc is told not to warn (as in the Makefile).
ENV CGO_ENABLED=1 \
    CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    GOFLAGS=-mod=readonly \
    GOPROXY=${GOPROXY} \
    GOSUMDB=${GOSUMDB}
# setcap (libcap2-bin) gives the binary its two file capabilities below.
RUN command -v setcap >/dev/null 2>&1 || \
    (apt-get update && apt-get install -y --no-install-recommends libcap2-bin && rm -rf /var/lib/apt/lists/*)
WORKDIR /src
# Modules first: this layer stays cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# -s -w: no symbol table, no DWARF (as `make build`): stack traces and pprof do not need them.
RUN go build -trimpath -o /out/fabric_exporter -ldflags "-s -w \
      -X github.com/prometheus/common/version.Version=${VERSION} \
      -X github.com/prometheus/common/version.Revision=${REVISION} \
      -X github.com/prometheus/common/version.Branch=${BRANCH} \
      -X github.com/prometheus/common/version.BuildUser=${BUILD_USER} \
      -X github.com/prometheus/common/version.BuildDate=${BUILD_DATE}" \
      ./cmd/fabric_exporter \
 && /out/fabric_exporter --version
# File capabilities (permitted + effective) for the non-root user: reading
# /proc/<pid>/environ, numa_maps and root/ of other users' processes needs
# CAP_SYS_PTRACE (ptrace read access) and CAP_DAC_READ_SEARCH (directories
# inside their root). A non-root process gets added capabilities only this
# way (neither Docker nor Kubernetes sets ambient capabilities), so the
# container must be started with both in its bounding set
# (--cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH; capabilities.add in the
# DaemonSet); without them the kernel refuses to start the binary. Hence
# no cap_syslog for the kernel-events collector, which every install would
# then have to grant: run that collector with --user 0 --cap-add SYSLOG
# --device /dev/kmsg, or through `fabric_exporter relay-kmsg` (docs/install.md).
RUN setcap cap_sys_ptrace,cap_dac_read_search=ep /out/fabric_exporter

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="fabric_exporter" \
      org.opencontainers.image.description="Prometheus exporter for RDMA/RoCE rails, PFC, NIC and GPU metrics of multi-node LLM inference servers" \
      org.opencontainers.image.source="https://github.com/fabric-exporter/fabric_exporter"
COPY --from=build /out/fabric_exporter /bin/fabric_exporter
# Under the NVIDIA container toolkit these make it inject the device nodes
# and libnvidia-ml (utility = NVML; nothing for CUDA compute is needed).
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
EXPOSE 10470
USER 65534:65534
ENTRYPOINT ["/bin/fabric_exporter", "--path.sysfs=/host/sys", "--path.procfs=/host/proc", "--path.rootfs=/host/root"]
