#!/usr/bin/env bash
# Installs Debian packages the suite can use (OpenMPI, an sshd) if they are missing.
#
#   tools/system_deps.sh [--if-root] PACKAGE...
#
# With --if-root, a user who is not root (or a system without apt-get) gets one line
# saying what is skipped and how to add it, and the script succeeds: the tests that
# need those packages skip with their own reason. Without it, the install is required.
# An sshd the package starts as a system service is stopped again: the two-host test
# runs its own sshd on private addresses only, and nothing should listen on port 22.
set -euo pipefail

optional=0
if [ "${1:-}" = "--if-root" ]; then optional=1; shift; fi
missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  if [ $optional = 1 ]; then
    echo "[system-deps] not installing ${missing[*]} (needs root and apt-get): MPI, two-host and Slurm tests will skip; run 'sudo make system-deps' to add them"
    exit 0
  fi
  echo "[system-deps] FAILED: ${missing[*]} missing; run this as root (sudo make install-mpi) on a Debian/Ubuntu machine" >&2
  exit 1
fi

echo "[system-deps] apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
  || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
if printf '%s\n' "${missing[@]}" | grep -qx openssh-server; then
  # The package enables and starts a system sshd on 0.0.0.0:22 where systemd runs; nothing here needs it.
  { systemctl disable --now ssh.service ssh.socket || service ssh stop; } >/dev/null 2>&1 || true
fi
echo "[system-deps] done"
