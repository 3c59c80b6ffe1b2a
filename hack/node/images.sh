#!/usr/bin/env bash
# Build the images a real node runs, without Docker or a registry, and write each as a docker archive that a
# node's containerd imports (tests/node, gpudra up --real-nodes):
#
#   hack/node/images.sh        # IMAGE_TAG=dev
#
# - localhost/gpudra-python:<recipe>   Debian bookworm with Python 3.11 (mmdebstrap), the base the Dockerfile is
#                                      built on here (PYTHON_IMAGE); the public python image cannot be pulled
# - localhost/gpudra:$IMAGE_TAG        gpudra's image, from the project's Dockerfile (buildah, chroot isolation)
# - localhost/gpudra-workload:latest   busybox, a simulated nvidia-smi and nbody sample, and by default a workload
#                                      that names its GPUs and runs until stopped (hack/node/workload)
# - localhost/gpudra-pause:<recipe>    the pods' sandbox image (hack/node/pause/pause.c)
#
# buildah keeps its storage under $GPUDRA_CACHE/node/containers, outside the work tree and away from the
# machine's own /var/lib/containers; its layer cache makes a rebuild after a source change take seconds (the
# Dockerfile installs the dependencies before it copies the source). The archives land in
# $GPUDRA_CACHE/node/images, with images.json naming each image's archive; an archive is rewritten only when its
# image changed. Needs root and `make node` (buildah, mmdebstrap, busybox-static).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HERE=hack/node
IMAGE_TAG="${IMAGE_TAG:-dev}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CACHE="${GPUDRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpudra}"
STORE="$CACHE/node/containers"
OUT="$CACHE/node/images"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

log() { printf '[make images] %s\n' "$*" >&2; }
fail() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root: buildah builds with chroot isolation and mmdebstrap installs packages"
for tool in buildah mmdebstrap busybox gcc; do
  command -v "$tool" >/dev/null || fail "$tool is missing: run make node (it installs buildah, mmdebstrap, busybox-static)"
done
mkdir -p "$STORE" "$OUT"
B=(buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver overlay)
POLICY="$STORE/policy.json"
printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$POLICY"
recipe() { cat "$@" | sha256sum | cut -c1-10; }
has_image() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# commit_rootfs <image> <rootfs dir or tar> <config args...>: an image of one layer.
commit_rootfs() {
  local image="$1" source="$2" ctr
  shift 2
  ctr="$("${B[@]}" from --signature-policy "$POLICY" scratch)"
  "${B[@]}" add "$ctr" "$source" / >/dev/null
  "${B[@]}" config "$@" "$ctr"
  "${B[@]}" commit --quiet --rm "$ctr" "$image" >/dev/null
}

build_base() {
  local image="localhost/gpudra-python:$SUITE-$(recipe "$0" "$CA_BUNDLE")"
  if ! has_image "$image"; then
    local work t=$SECONDS
    work="$(mktemp -d)"
    # The machine's certificate authorities go into the base (pip in the Dockerfile reaches PyPI through them;
    # where no proxy re-signs TLS they are Debian's own), so does `python` (python-is-python3), as in the public
    # python image.
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' \
      --customize-hook="cp '$CA_BUNDLE' \"\$1/etc/ssl/certs/ca-certificates.crt\"" \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      "$SUITE" "$work/rootfs.tar" "$MIRROR" || fail "mmdebstrap could not build a $SUITE base from $MIRROR"
    commit_rootfs "$image" "$work/rootfs.tar" --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt --cmd python3
    rm -rf "$work"
    log "built $image in $((SECONDS - t)) s"
  fi
  BASE="$image"
}

build_pause() {
  local image="localhost/gpudra-pause:$(recipe "$HERE/pause/pause.c")" work
  if ! has_image "$image"; then
    work="$(mktemp -d)"
    gcc -static -Os -s -o "$work/pause" "$HERE/pause/pause.c" || fail "gcc could not build the pause binary statically"
    commit_rootfs "$image" "$work/pause" --entrypoint '["/pause"]' --user 65535:65535
    rm -rf "$work"
    log "built $image"
  fi
  PAUSE="$image"
}

build_workload() {
  local image=localhost/gpudra-workload:latest work applet
  local wanted
  wanted="$(recipe "$0" "$HERE"/workload/* "$(command -v busybox)")"
  if [ "$("${B[@]}" inspect --type image --format '{{index .ImageAnnotations "gpudra.dev/recipe"}}' "$image" 2>/dev/null)" != "$wanted" ]; then
    work="$(mktemp -d)"
    mkdir -p "$work/root/bin" "$work/root/usr/bin" "$work/root/tmp" "$work/root/etc"
    cp "$(command -v busybox)" "$work/root/bin/busybox"
    for applet in $("$work/root/bin/busybox" --list); do
      [ "$applet" = busybox ] || ln -sf busybox "$work/root/bin/$applet"
    done
    # NVIDIA's quickstart pods run `bash -c ...`: busybox's sh stands in for bash (busybox has no bash applet)
    printf '#!/bin/sh\nexec /bin/sh "$@"\n' >"$work/root/bin/bash"
    chmod 755 "$work/root/bin/bash"
    cp "$HERE/workload/nvidia-smi" "$HERE/workload/gpu-workload" "$work/root/usr/bin/"
    cp "$HERE/workload/sample" "$work/root/tmp/sample"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$work/root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$work/root/etc/group"
    local ctr
    ctr="$("${B[@]}" from --signature-policy "$POLICY" scratch)"
    "${B[@]}" copy "$ctr" "$work/root/" / >/dev/null
    "${B[@]}" config --env PATH=/usr/bin:/bin --cmd '["gpu-workload"]' --annotation "gpudra.dev/recipe=$wanted" "$ctr"
    "${B[@]}" commit --quiet --rm "$ctr" "$image" >/dev/null
    rm -rf "$work"
    log "built $image"
  fi
  WORKLOAD="$image"
}

build_gpudra() {
  local image="localhost/gpudra:$IMAGE_TAG" t=$SECONDS
  "${B[@]}" bud --quiet --layers --isolation chroot --signature-policy "$POLICY" \
    --build-arg "PYTHON_IMAGE=$BASE" -t "$image" -f Dockerfile . >/dev/null \
    || fail "buildah could not build the Dockerfile on $BASE"
  log "built $image in $((SECONDS - t)) s"
  GPUDRA="$image"
}

# export_archive <image>: a docker archive of the image in $OUT, rewritten when the image's id changed.
export_archive() {
  local image="$1" id name
  id="$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$image")"
  name="$(tr '/:' '__' <<<"$image").tar"
  if [ ! -f "$OUT/$name" ] || [ "$(cat "$OUT/$name.id" 2>/dev/null)" != "$id" ]; then
    rm -f "$OUT/$name"
    "${B[@]}" push --quiet --signature-policy "$POLICY" "$image" "docker-archive:$OUT/$name.tmp:$image" >/dev/null
    mv "$OUT/$name.tmp" "$OUT/$name"
    echo "$id" >"$OUT/$name.id"
  fi
  printf '    "%s": {"archive": "%s", "id": "%s"}' "$image" "$name" "$id"
}

build_base
build_pause
build_workload
build_gpudra
{
  echo "{"
  echo '  "sandbox": "'"$PAUSE"'",'
  echo '  "gpudra": "'"$GPUDRA"'",'
  echo '  "workload": "'"$WORKLOAD"'",'
  echo '  "images": {'
  export_archive "$PAUSE"; echo ","
  export_archive "$WORKLOAD"; echo ","
  export_archive "$GPUDRA"; echo
  echo "  }"
  echo "}"
} >"$OUT/images.json.tmp"
mv "$OUT/images.json.tmp" "$OUT/images.json"
log "images: $OUT/images.json"
