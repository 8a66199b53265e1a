#!/usr/bin/env bash
# Host discovery for elastic Horovod: prints the "host:slots" lines of the hosts file.
#   horovodrun --host-discovery-script tools/discover_hosts.sh ...   (HVDKERAS_HOSTS_FILE=path/to/hosts)
# Edit the file while the job runs to add or remove hosts; blank lines and # comments are ignored.
set -eu
file=${HVDKERAS_HOSTS_FILE:-hosts.txt}
[ -f "$file" ] || exit 0
grep -v '^\s*\(#\|$\)' "$file" || true
