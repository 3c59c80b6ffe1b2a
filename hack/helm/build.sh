#!/usr/bin/env bash
# Build helm from its Go module (helm.sh/helm/v3 on the Go module proxy) and print the binary's path on stdout.
#
#   hack/helm/build.sh                      # HELM_VERSION=3.22.0 by default
#   HELM_VERSION=3.21.4 hack/helm/build.sh  # another version beside it
#
# The binary lands in $GPUDRA_CACHE/helm/v<version>-<recipe>/bin/helm (default ~/.cache/gpudra), outside the work
# tree and keyed by version and by a hash of this script; a second run with the binary present does nothing but
# print its path. As helm's own Makefile does, the Kubernetes version it assumes (`helm template`'s
# .Capabilities.KubeVersion, helm lint's deprecation checks) is that of the client-go its release requires.
# The chart's test (tests/unit/test_helm_chart.py) renders charts/gpudra with it.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-3.22.0}"
HELM_VERSION="${HELM_VERSION#v}"
CACHE="${GPUDRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpudra}"
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf '[make helm] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is not on PATH: helm is built from its Go module"; exit 1; }
major="${HELM_VERSION%%.*}"
module="helm.sh/helm/v$major"
recipe="$(sha256sum "$0" | cut -c1-8)"
out="$CACHE/helm/v$HELM_VERSION-$recipe/bin"
bin="$out/helm"
if [ ! -x "$bin" ]; then
  work="$CACHE/helm/v$HELM_VERSION-$recipe/wrapper"
  mkdir -p "$work" "$out"
  start=$SECONDS
  # A throwaway module of its own, so helm's dependencies are exactly those its release's go.mod asks for.
  printf 'module gpudra.dev/build/helm\n\ngo 1.24\n' >"$work/go.mod"
  (cd "$work" && go get "$module@v$HELM_VERSION")
  gomod="$(cd "$work" && go list -m -f '{{.GoMod}}' "$module")"
  client_go="$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -n1)"
  [ -n "$client_go" ] || { log "no k8s.io/client-go in $gomod"; exit 1; }
  ldflags="-s -w -X $module/internal/version.version=v$HELM_VERSION -X $module/internal/version.gitTreeState=clean"
  for p in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X $module/$p.k8sVersionMajor=1 -X $module/$p.k8sVersionMinor=$client_go"
  done
  (cd "$work" && go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$module/cmd/helm")
  mv "$bin.tmp" "$bin"
  log "helm v$HELM_VERSION built in $((SECONDS - start)) s into $out"
fi
"$bin" version --short >/dev/null || { log "$bin does not run"; exit 1; }
echo "$bin"
