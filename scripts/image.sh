#!/usr/bin/env bash
# Builds the image meridian:VERSION (and meridian:latest) from
# deploy/image/Dockerfile with the host's docker, from scratch: no image is
# pulled. VERSION defaults to `git describe --tags --always --dirty`.
#   scripts/image.sh            # needs a running dockerd
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${VERSION:-$(git describe --tags --always --dirty)}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp deploy/image/Dockerfile "$ctx/"
mkdir -p "$ctx/rootfs/usr/bin" "$ctx/rootfs/etc" "$ctx/rootfs/tmp" "$ctx/data"
chmod 1777 "$ctx/rootfs/tmp"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/rootfs/usr/bin/meridian" ./cmd/meridian
printf 'root:x:0:0:root:/:/sbin/nologin\nmeridian:x:65532:65532:meridian:/data:/sbin/nologin\n' > "$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nmeridian:x:65532:\n' > "$ctx/rootfs/etc/group"
docker build -q -t "meridian:$VERSION" -t meridian:latest "$ctx"
echo "built meridian:$VERSION"
