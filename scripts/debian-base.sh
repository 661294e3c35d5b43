#!/usr/bin/env bash
# Build the agent image's base from Debian's own packages (there is no Docker Hub
# to pull from): debootstrap a minimal bookworm and import it as a Docker image.
#   debian-base.sh IMAGE_NAME MIRROR [SUITE]
# MIRROR is the Debian mirror apt on this machine already uses (nanoclaw.runtime.image
# reads it from the apt sources). Uses $DOCKER_HOST. Takes about a minute and a half.
set -euo pipefail
NAME=${1:?usage: $0 IMAGE_NAME MIRROR [SUITE]}
MIRROR=${2:?usage: $0 IMAGE_NAME MIRROR [SUITE]}
SUITE=${3:-bookworm}
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/install-sandboxes.sh" debootstrap

ROOT=$(mktemp -d /var/tmp/nanoclaw-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
# tzdata: the agent lives in the user's timezone; passwd (required) gives useradd.
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,tzdata \
  "$SUITE" "$ROOT" "$MIRROR"
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb
tar --numeric-owner -C "$ROOT" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$NAME"
