#!/usr/bin/env bash
# Build or install the container runtime of a real node (tests/node, gpudra up --real-nodes):
#
#   hack/node/build.sh     # CONTAINERD_VERSION=2.4.2 CNI_PLUGINS_VERSION=1.10.0 CRICTL_VERSION=1.37.0
#
# - containerd 2.x (containerd, containerd-shim-runc-v2, ctr), crictl and the CNI plugins bridge, host-local,
#   loopback and portmap are built from their Go modules into $GPUDRA_CACHE/node/<versions>/bin (default
#   ~/.cache/gpudra), outside the work tree; a second run with the binaries present does nothing.
# - runc, buildah, mmdebstrap and busybox-static come from Debian's packages (apt-get, as root).
# It fails, never skips, with one line naming what is missing and how to get it. The images a node runs are
# built by hack/node/images.sh.
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.4.2}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-1.10.0}"
CRICTL_VERSION="${CRICTL_VERSION:-1.37.0}"
CACHE="${GPUDRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpudra}"
DEBIAN_PACKAGES=(runc buildah mmdebstrap busybox-static)
DEBIAN_COMMANDS=(runc buildah mmdebstrap busybox)

export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf '[make node] %s\n' "$*" >&2; }
fail() { log "$*"; exit 1; }

install_debian_packages() {
  local missing=() i
  for i in "${!DEBIAN_COMMANDS[@]}"; do
    command -v "${DEBIAN_COMMANDS[$i]}" >/dev/null || missing+=("${DEBIAN_PACKAGES[$i]}")
  done
  [ ${#missing[@]} -eq 0 ] && return
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    fail "needs ${missing[*]} (Debian: apt-get install ${missing[*]}, as root)"
  fi
  log "installing ${missing[*]} from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# go_build <module@version> <package> <output> [ldflags]: one binary of a module, in a throwaway module of its own
# so its dependencies are exactly those its release asks for.
go_build() {
  local module="$1" package="$2" output="$3" ldflags="-s -w ${4:-}" work
  work="$(dirname "$output")/../wrapper/${module//\//_}"
  mkdir -p "$work"
  [ -f "$work/go.mod" ] || printf 'module gpudra.dev/build/node\n\ngo 1.24\n' >"$work/go.mod"
  (cd "$work" && go get "$module" && go build -trimpath -tags no_btrfs -ldflags "$ldflags" -o "$output.tmp" "$package") \
    || fail "could not build $package from $module (Go module proxy)"
  mv "$output.tmp" "$output"
}

build_runtime() {
  local recipe out
  recipe="$(sha256sum "$0" | cut -c1-8)"
  out="$CACHE/node/containerd-v$CONTAINERD_VERSION-cni-v$CNI_PLUGINS_VERSION-crictl-v$CRICTL_VERSION-$recipe"
  local bin="$out/bin" cni="$out/cni" start=$SECONDS t b
  mkdir -p "$bin" "$cni"
  command -v go >/dev/null || fail "go is not on PATH: containerd, crictl and the CNI plugins are built from Go modules"
  local containerd="github.com/containerd/containerd/v2@v$CONTAINERD_VERSION"
  for b in containerd containerd-shim-runc-v2 ctr; do
    [ -x "$bin/$b" ] && continue
    t=$SECONDS
    go_build "$containerd" "github.com/containerd/containerd/v2/cmd/$b" "$bin/$b" \
      "-X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION"
    log "built $b v$CONTAINERD_VERSION in $((SECONDS - t)) s"
  done
  if [ ! -x "$bin/crictl" ]; then
    t=$SECONDS
    go_build "sigs.k8s.io/cri-tools@v$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl "$bin/crictl" \
      "-X sigs.k8s.io/cri-tools/pkg/version.Version=v$CRICTL_VERSION"
    log "built crictl v$CRICTL_VERSION in $((SECONDS - t)) s"
  fi
  for b in bridge host-local loopback portmap; do
    [ -x "$cni/$b" ] && continue
    local kind=main
    [ "$b" = host-local ] && kind=ipam
    [ "$b" = portmap ] && kind=meta
    t=$SECONDS
    go_build "github.com/containernetworking/plugins@v$CNI_PLUGINS_VERSION" \
      "github.com/containernetworking/plugins/plugins/$kind/$b" "$cni/$b"
    log "built CNI plugin $b v$CNI_PLUGINS_VERSION in $((SECONDS - t)) s"
  done
  ln -sfn "$(basename "$out")" "$CACHE/node/current"
  if [ $((SECONDS - start)) -gt 1 ]; then log "runtime built in $((SECONDS - start)) s into $out"; fi
  log "runtime: $out"
}

install_debian_packages
build_runtime
