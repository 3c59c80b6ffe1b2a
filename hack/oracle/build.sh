#!/usr/bin/env bash
# Build the allocator oracle (Kubernetes' own structured allocator behind a JSON-lines interface, main.go) and
# print the binary's path on stdout.
#
#   hack/oracle/build.sh          # builds once, then a no-op that prints the path
#
# The binary lands in $GPUDRA_CACHE/oracle/<hash>/ (default ~/.cache/gpudra), outside the work tree and keyed
# by a hash of this directory's Go sources, go.mod, go.sum and the Go version, so an edit rebuilds and an
# unchanged tree does nothing. Modules come from the Go module proxy at the versions go.sum pins.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${GPUDRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpudra}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="-mod=readonly"
export CGO_ENABLED=0

log() { printf '[make oracle] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is not on PATH: the allocator oracle needs Go (see go.mod for the version)"; exit 1; }
key="$( (cd "$here" && cat go.mod go.sum ./*.go && go version) | sha256sum | cut -c1-16)"
out="$CACHE/oracle/$key"
bin="$out/gpudra-allocator-oracle"
if [ ! -x "$bin" ]; then
  mkdir -p "$out"
  start=$SECONDS
  (cd "$here" && go build -trimpath -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  log "built $bin in $((SECONDS - start)) s"
fi
echo "$bin"
