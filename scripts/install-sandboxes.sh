#!/usr/bin/env bash
# Install what the sandboxes need from Debian's packages, only what is missing:
# docker.io (the engine + CLI), bubblewrap (the Docker-free runtime) and
# debootstrap (builds the base image, since there is no Docker Hub to pull from).
# Usage: install-sandboxes.sh [docker|bwrap|debootstrap ...]   (no argument: all three)
set -euo pipefail
want=("$@")
[ ${#want[@]} -eq 0 ] && want=(docker bwrap debootstrap)

pkgs=()
for w in "${want[@]}"; do
  case "$w" in
    docker)      command -v dockerd >/dev/null 2>&1 || pkgs+=(docker.io) ;;
    bwrap)       command -v bwrap >/dev/null 2>&1 || pkgs+=(bubblewrap) ;;
    debootstrap) command -v debootstrap >/dev/null 2>&1 || pkgs+=(debootstrap) ;;
    *) echo "usage: $0 [docker|bwrap|debootstrap ...]" >&2; exit 2 ;;
  esac
done
[ ${#pkgs[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "missing ${pkgs[*]}: run as root, or: sudo apt-get install -y ${pkgs[*]}" >&2
  exit 1
fi
echo "installing ${pkgs[*]} from Debian's packages..." >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2
