#!/usr/bin/env bash
# Builds the fabric_exporter image from the top-level Dockerfile and runs it
# for real: CI calls this after `make test` (.ci/run). Runs as root on Debian.
#
# No image registry is reachable from CI, so the base images are local
# stand-ins built here and passed as build arguments:
#   local/debian:bookworm-minbase  debootstrap --variant=minbase bookworm,
#                                  trimmed like debian:bookworm-slim
#   local/golang:<go>-bookworm     minbase + gcc, libc6-dev, ca-certificates,
#                                  git, libcap2-bin + this machine's Go
# The debootstrap trees are cached as tarballs in $CACHE_DIR, keyed by suite,
# mirror and package list, so a rerun on the same machine skips debootstrap;
# an imported image whose key label matches is reused as it is.
#
# Then: build the image (module downloads through the host network), run it
# on the fixture sysfs/ethtool/GPU files with the documented restrictions,
# scrape /metrics, check the rail metrics, non-root, capabilities, and report
# the image size. Prints PASS/FAIL lines; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE_DIR=${FABRIC_CI_CACHE:-/var/cache/fabric_exporter-ci}
IMAGE=${FABRIC_CI_IMAGE:-fabric_exporter:ci}
RUNTIME_IMAGE=local/debian:$SUITE-minbase
BUILDER_PKGS=gcc,libc6-dev,ca-certificates,git,libcap2-bin
# Bump when the way the trees are made or trimmed changes (invalidates the cache).
RECIPE=1

export DEBIAN_FRONTEND=noninteractive
export PATH="$PATH:/usr/local/go/bin"
failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
die() { echo "FAIL: $*"; echo "image test: FAILED after ${SECONDS}s"; exit 1; }
step() { echo "== [${SECONDS}s] $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, dockerd)"
mkdir -p "$CACHE_DIR"
command -v go >/dev/null || die "go not found (/usr/local/go/bin)"

step "tools"
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  step "starting dockerd (log: /var/log/fabric_exporter-ci-dockerd.log)"
  setsid dockerd </dev/null >/var/log/fabric_exporter-ci-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -20 /var/log/fabric_exporter-ci-dockerd.log; die "dockerd did not start"; }
fi
echo "docker $(docker version -f '{{.Server.Version}}' 2>/dev/null)"

# BuildKit: the legacy builder drops the binary's file capabilities
# (security.capability) in COPY --from. Docker >= 23 needs the buildx plugin
# for it; Debian's docker.io 20.10 client has it built in.
export DOCKER_BUILDKIT=1
build_docker=docker
if ! docker buildx version >/dev/null 2>&1 && [ -x /usr/bin/docker ]; then build_docker=/usr/bin/docker; fi

# rootfs NAME INCLUDE: path of the cached debootstrap tarball (made if missing).
rootfs() {
  local name=$1 include=$2 key tar dir
  key=$(printf '%s\n' "$SUITE" "$MIRROR" "$include" "$RECIPE" | sha256sum | cut -c1-12)
  tar=$CACHE_DIR/$SUITE-minbase-$name-$key.tar
  if [ -s "$tar" ]; then
    echo "cached $tar" >&2
  else
    mkdir -p "$CACHE_DIR"
    dir=$(mktemp -d "$CACHE_DIR/rootfs.XXXXXX")
    echo "debootstrap --variant=minbase ${include:+--include=$include }$SUITE ($name)" >&2
    if ! debootstrap --variant=minbase ${include:+--include="$include"} "$SUITE" "$dir" "$MIRROR" >"$dir.log" 2>&1; then
      tail -20 "$dir.log" >&2
      rm -rf "$dir"
      return 1
    fi
    # What debian:*-slim leaves out: package lists and archives, docs, man
    # pages, locales.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
      "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* \
      "$dir"/usr/share/locale/* "$dir"/var/log/*.log "$dir"/var/cache/debconf/*-old
    tar --numeric-owner --xattrs -C "$dir" -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
    rm -rf "$dir" "$dir.log"
  fi
  echo "$tar"
}

# image_key IMAGE: the key label of a local image, empty when absent.
image_key() {
  docker image inspect -f '{{index .Config.Labels "org.fabric-exporter.ci-key"}}' "$1" 2>/dev/null || true
}

step "base image $RUNTIME_IMAGE"
rt_tar=$(rootfs runtime "") || die "debootstrap of the runtime base failed"
rt_key=$(basename "$rt_tar" .tar)
if [ "$(image_key "$RUNTIME_IMAGE")" = "$rt_key" ]; then
  echo "image up to date"
else
  docker import --change "LABEL org.fabric-exporter.ci-key=$rt_key" --change 'CMD ["bash"]' \
    "$rt_tar" "$RUNTIME_IMAGE" >/dev/null || die "docker import $RUNTIME_IMAGE"
fi
pass "runtime base $RUNTIME_IMAGE"

GOROOT_LOCAL=$(go env GOROOT)
GOVER=$(go env GOVERSION)
BUILDER_IMAGE=local/golang:${GOVER#go}-$SUITE
step "base image $BUILDER_IMAGE"
b_tar=$(rootfs gobuild "$BUILDER_PKGS") || die "debootstrap of the Go builder base failed"
# Module downloads go through the host's network, so the builder trusts what
# the host trusts (e.g. the CA of a TLS-inspecting egress proxy).
HOST_CA=/etc/ssl/certs/ca-certificates.crt
ca_sum=none
[ -s "$HOST_CA" ] && ca_sum=$(sha256sum "$HOST_CA" | cut -c1-8)
b_key="$(basename "$b_tar" .tar)-$GOVER-ca$ca_sum"
if [ "$(image_key "$BUILDER_IMAGE")" = "$b_key" ]; then
  echo "image up to date"
else
  dir=$(mktemp -d "$CACHE_DIR/gobuild.XXXXXX")
  tar --numeric-owner --xattrs -C "$dir" -xf "$b_tar"
  mkdir -p "$dir/usr/local" "$dir/go"
  cp -a "$GOROOT_LOCAL" "$dir/usr/local/go"
  [ -s "$HOST_CA" ] && cp "$HOST_CA" "$dir/etc/ssl/certs/ca-certificates.crt"
  tar --numeric-owner -C "$dir" -c . | docker import \
    --change "LABEL org.fabric-exporter.ci-key=$b_key" \
    --change 'ENV PATH=/usr/local/go/bin:/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV GOPATH=/go' --change 'CMD ["bash"]' \
    - "$BUILDER_IMAGE" >/dev/null || { rm -rf "$dir"; die "docker import $BUILDER_IMAGE"; }
  rm -rf "$dir"
fi
pass "builder base $BUILDER_IMAGE"

# The build date is the commit's, so that a rerun on an unchanged tree is
# answered from the build cache.
step "docker build $IMAGE"
build_start=$SECONDS
if ! $build_docker build --progress=plain --network host \
  --build-arg GO_IMAGE="$BUILDER_IMAGE" \
  --build-arg RUNTIME_IMAGE="$RUNTIME_IMAGE" \
  --build-arg GOPROXY="$(go env GOPROXY)" \
  --build-arg GOSUMDB="$(go env GOSUMDB)" \
  --build-arg VERSION="$(git describe --tags --always --dirty 2>/dev/null || echo dev)" \
  --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  --build-arg BRANCH="$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)" \
  --build-arg BUILD_USER=ci \
  --build-arg BUILD_DATE="$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d-%H:%M:%S HEAD 2>/dev/null || echo unknown)" \
  -t "$IMAGE" . >"$CACHE_DIR/build.log" 2>&1; then
  tail -30 "$CACHE_DIR/build.log"
  die "docker build (log: $CACHE_DIR/build.log)"
fi
pass "docker build ($((SECONDS - build_start))s)"
# Earlier builds of the image, untagged by this one (the build cache stays).
docker image prune -f --filter "label=org.opencontainers.image.title=fabric_exporter" >/dev/null || true

containers=()
cleanup() {
  for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

# The documented restrictions (docs/install.md, "Docker"): read-only root, all
# capabilities dropped but the two the binary carries, no new privileges,
# the host trees read-only. Here the "host" is the fixture tree: the whole
# sysfs tree is mounted, its class links are relative symlinks inside it.
# The port is published on 127.0.0.1 only.
# Docker < 24 (Debian 12's docker.io is 20.10) starts non-root containers
# with empty permitted capabilities, so with no-new-privileges the binary's
# file capabilities are dropped (moby#45491, fixed in 24.0): leave it out there.
nnp=(--security-opt no-new-privileges)
server_major=$(docker version -f '{{.Server.Version}}' | cut -d. -f1)
if [ "${server_major:-0}" -lt 24 ]; then
  nnp=()
  echo "note: Docker $(docker version -f '{{.Server.Version}}') < 24: running without no-new-privileges (moby#45491)"
fi
name=fabric-exporter-ci-$$
containers+=("$name")
step "docker run $name"
docker run -d --name "$name" --read-only \
  --cap-drop ALL --cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH \
  "${nnp[@]}" \
  -p 127.0.0.1::10470 \
  -v "$REPO/collector/fixtures/sys:/host/sys:ro" \
  -v "$REPO/collector/fixtures/ethtool:/fixtures/ethtool:ro" \
  -v "$REPO/collector/fixtures/gpu:/fixtures/gpu:ro" \
  -v "$REPO/collector/fixtures/phy:/fixtures/phy:ro" \
  "$IMAGE" \
  --collector.pfc.ethtool-fixtures=/fixtures/ethtool --collector.phy.fixtures=/fixtures/phy \
  --collector.gpu.fixture=/fixtures/gpu/dcgm-8gpu.json >/dev/null || die "docker run"

hostport=$(docker port "$name" 10470/tcp | head -1)
case $hostport in
  127.0.0.1:*) pass "port published on 127.0.0.1 only ($hostport)" ;;
  *) fail "port published as '$hostport', want 127.0.0.1:*" ;;
esac
metrics=""
for _ in $(seq 1 50); do
  if metrics=$(curl -fsS --max-time 5 "http://$hostport/metrics" 2>/dev/null); then break; fi
  [ "$(docker inspect -f '{{.State.Running}}' "$name")" = true ] || break
  sleep 0.2
done
if [ -z "$metrics" ]; then
  docker logs "$name" 2>&1 | tail -20
  die "no /metrics from the container"
fi
pass "scraped /metrics ($(grep -vc '^#' <<<"$metrics") series)"

want() { # want DESCRIPTION REGEXP
  if grep -Eq "$2" <<<"$metrics"; then pass "$1"; else fail "$1: no line matches $2"; fi
}
want "rail mlx5_0 on eth0" '^fabric_rail_info\{device="mlx5_0",netdev="eth0",port="1",rail="mlx5_0"\} 1$'
want "rail mlx5_3 on eth3" '^fabric_rail_info\{device="mlx5_3",netdev="eth3",port="1",rail="mlx5_3"\} 1$'
want "RDMA transmitted bytes of mlx5_0" '^fabric_rdma_port_transmitted_bytes_total\{device="mlx5_0",port="1",rail="mlx5_0"\} [0-9.e+]+$'
want "RDMA transmitted bytes of mlx5_3" '^fabric_rdma_port_transmitted_bytes_total\{device="mlx5_3",port="1",rail="mlx5_3"\} [0-9.e+]+$'
want "PFC pause counters from the ethtool fixtures" '^fabric_pfc_pause_frames_total\{direction="rx",netdev="eth0",priority="3",rail="mlx5_0"\} [0-9]+$'
want "GPU fixture" '^fabric_gpu_info\{.*gpu="7"'
for c in rdma netdev pfc gpu; do
  want "collector $c succeeded" "^fabric_scrape_collector_success\\{collector=\"$c\"\\} 1$"
done

uid=$(docker exec "$name" id -u 2>/dev/null || echo "?")
user=$(docker inspect -f '{{.Config.User}}' "$name")
if [ "$uid" != 0 ] && [ "$uid" != "?" ] && [ "$user" = 65534:65534 ]; then
  pass "runs as non-root (id -u: $uid, Config.User: $user)"
else
  fail "runs as uid '$uid' (Config.User '$user'), want non-root 65534"
fi
# The exporter itself (PID 1): non-root uid, and exactly CAP_DAC_READ_SEARCH
# (bit 2) and CAP_SYS_PTRACE (bit 19) effective.
status=$(docker exec "$name" cat /proc/1/status 2>/dev/null || true)
puid=$(awk '/^Uid:/ {print $2 "/" $3}' <<<"$status")
capeff=$(awk '/^CapEff:/ {print $2}' <<<"$status")
if [ "$puid" = 65534/65534 ]; then pass "exporter process uid $puid"; else fail "exporter process uid '$puid', want 65534/65534"; fi
if [ "$capeff" = 0000000000080004 ]; then
  pass "exporter capabilities: CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE only (CapEff $capeff)"
else
  fail "exporter CapEff '$capeff', want 0000000000080004"
fi

# --collector.process.docker-host against this real dockerd: a process in the
# running container gets the container's name (collector/docker_test.go).
step "docker names (go test -run TestDockerNamesRealDaemon)"
if out=$(FABRIC_TEST_DOCKER_HOST=unix:///var/run/docker.sock FABRIC_TEST_DOCKER_CONTAINER="$name" \
  go test -count=1 -run '^TestDockerNamesRealDaemon$' -v ./collector 2>&1) && grep -q -- '--- PASS: TestDockerNamesRealDaemon' <<<"$out"; then
  pass "container_name from the Docker Engine API ($name)"
else
  tail -20 <<<"$out"
  fail "container_name from the Docker Engine API"
fi

# Without the two capabilities in the bounding set the kernel refuses to
# exec the binary (docs/install.md, "Docker", says so; this keeps it true).
nocap=fabric-exporter-ci-nocap-$$
containers+=("$nocap")
docker run --name "$nocap" --cap-drop ALL "$IMAGE" --version >/dev/null 2>&1 && rc=0 || rc=$?
if [ "$rc" != 0 ]; then
  pass "refuses to start without SYS_PTRACE and DAC_READ_SEARCH (exit $rc)"
else
  fail "started without SYS_PTRACE and DAC_READ_SEARCH"
fi

size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
base=$(docker image inspect -f '{{.Size}}' "$RUNTIME_IMAGE")
echo "image $IMAGE: $((size / 1048576)) MiB ($(((size - base) / 1048576)) MiB on top of $RUNTIME_IMAGE, $((base / 1048576)) MiB)"

if [ "$failures" -gt 0 ]; then
  echo "image test: $failures FAILED after ${SECONDS}s"
  exit 1
fi
echo "image test: PASS in ${SECONDS}s"
