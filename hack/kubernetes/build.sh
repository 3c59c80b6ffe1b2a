#!/usr/bin/env bash
# Build the real Kubernetes control plane (and kubelet) and etcd from the Go module proxy.
#
#   hack/kubernetes/build.sh            # K8S_VERSION=1.37.2 ETCD_VERSION=3.6.16 by default
#   K8S_VERSION=1.34.4 hack/kubernetes/build.sh
#
# Binaries land in $GPUDRA_CACHE/kubernetes/v<version>/bin (default ~/.cache/gpudra), outside the work tree and
# keyed by version; a second run with the binaries present does nothing. k8s.io/kubernetes requires its ~30 staging
# modules at v0.0.0, which does not exist on the proxy, so a throwaway wrapper module replaces each of them with its
# published v0.<minor>.<patch>[-<pre-release>] twin; the list is read from that release's own go.mod, never typed here.
# Beside them goes gpudra-fake-cri (hack/kubernetes/fakecri): Kubernetes' own fake container runtime of the same
# version, for a real kubelet on a simulated node (gpudra up --real-kubelet).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
K8S_VERSION="${K8S_VERSION#v}"
# The staging modules' twin of a release: v0.37.2 for 1.37.2, v0.38.0-beta.0 for 1.38.0-beta.0.
STAGING_VERSION="v0.${K8S_VERSION#1.}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
ETCD_VERSION="${ETCD_VERSION#v}"
CACHE="${GPUDRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpudra}"
K8S_BINARIES=(kube-apiserver kube-scheduler kube-controller-manager kubelet)

export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# The Go toolchain for a release that needs a newer Go than the local one (used only then).
NEWER_GO="${NEWER_GO:-go1.27.3}"

log() { printf '[make kubernetes] %s\n' "$*" >&2; }

build_kubernetes() {
  local out="$CACHE/kubernetes/v$K8S_VERSION/bin" missing=()
  for b in "${K8S_BINARIES[@]}"; do [ -x "$out/$b" ] || missing+=("$b"); done
  if [ ${#missing[@]} -eq 0 ]; then log "kubernetes v$K8S_VERSION: up to date in $out"; return; fi
  local minor staging work start
  minor="$(cut -d. -f2 <<<"$K8S_VERSION")"
  work="$CACHE/kubernetes/v$K8S_VERSION/wrapper"
  mkdir -p "$work" "$out"
  start=$SECONDS
  local gomod download
  download="$(cd "$work" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" 2>&1)" || true
  if [ "$GOTOOLCHAIN" = local ] && grep -q 'requires go' <<<"$download"; then
    # A release whose go.mod needs a newer Go than this machine's (1.38 needs 1.27): the go command fetches the
    # approved toolchain from the Go module proxy, and every later go command of this script runs under it.
    log "kubernetes v$K8S_VERSION needs a newer Go than $(go env GOVERSION): building with GOTOOLCHAIN=$NEWER_GO"
    export GOTOOLCHAIN="$NEWER_GO"
    download="$(cd "$work" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" 2>&1)" || true
  fi
  gomod="$(sed -n 's/.*"GoMod": "\(.*\)",/\1/p' <<<"$download")"
  [ -f "$gomod" ] || { log "could not download k8s.io/kubernetes@v$K8S_VERSION from the Go module proxy"; exit 1; }
  # Every `k8s.io/<name> => ./staging/src/k8s.io/<name>` line of the release's go.mod is one staging module.
  staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$gomod" | sort -u)"
  [ -n "$staging" ] || { log "no staging modules found in $gomod"; exit 1; }
  {
    echo "module gpudra.dev/build/kubernetes"
    echo
    sed -n 's/^go \(.*\)/go \1/p' "$gomod" | head -n1
    sed -n 's/^godebug \(.*\)/godebug \1/p' "$gomod"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    while read -r m; do echo "	$m => $m $STAGING_VERSION"; done <<<"$staging"
    echo ")"
  } >"$work/go.mod"
  log "kubernetes v$K8S_VERSION: $(wc -l <<<"$staging") staging modules replaced with $STAGING_VERSION"
  local pkgs=()
  for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  (cd "$work" && go get "${pkgs[@]/%/@v$K8S_VERSION}")
  local ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for b in "${missing[@]}"; do
    local t=$SECONDS
    (cd "$work" && go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$out/$b.tmp" "$out/$b"
    log "built $b in $((SECONDS - t)) s"
  done
  log "kubernetes v$K8S_VERSION built in $((SECONDS - start)) s into $out"
}

build_fake_cri() {
  # Kubernetes' fake CRI runtime (k8s.io/cri-client/pkg/fake) of this version behind gpudra's recording main
  # package; rebuilt when that source changes.
  local out="$CACHE/kubernetes/v$K8S_VERSION/bin" work="$CACHE/kubernetes/v$K8S_VERSION/fakecri"
  local src
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fakecri/main.go"
  if [ -x "$out/gpudra-fake-cri" ] && cmp -s "$src" "$work/main.go"; then
    log "gpudra-fake-cri v$K8S_VERSION: up to date in $out"
    return
  fi
  rm -rf "$work"
  mkdir -p "$work" "$out"
  printf 'module gpudra.dev/build/fakecri\n\ngo 1.24\n' >"$work/go.mod"
  (cd "$work" && go get "k8s.io/cri-client@$STAGING_VERSION" "k8s.io/cri-api@$STAGING_VERSION")
  cp "$src" "$work/main.go.tmp"
  (cd "$work" && mv main.go.tmp main.go && go build -trimpath -ldflags "-s -w" -o "$out/gpudra-fake-cri.tmp" .) \
    || { rm -f "$work/main.go"; exit 1; }
  mv "$out/gpudra-fake-cri.tmp" "$out/gpudra-fake-cri"
  log "built gpudra-fake-cri (cri-client $STAGING_VERSION) into $out"
}

build_etcd() {
  local out="$CACHE/etcd/v$ETCD_VERSION/bin"
  if [ -x "$out/etcd" ]; then log "etcd v$ETCD_VERSION: up to date in $out"; return; fi
  local work="$CACHE/etcd/v$ETCD_VERSION/wrapper" start=$SECONDS
  mkdir -p "$work" "$out"
  # A module of its own, so etcd's gRPC and otel versions never move kube-apiserver's.
  printf 'module gpudra.dev/build/etcd\n\ngo 1.24\n' >"$work/go.mod"
  (cd "$work" && go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION")
  (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$out/etcd.tmp" "$out/etcd"
  log "etcd v$ETCD_VERSION built in $((SECONDS - start)) s into $out"
}

build_etcd
build_kubernetes
build_fake_cri
