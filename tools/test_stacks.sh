#!/usr/bin/env bash
# `make test` over several stacks: each stack's suite in turn, the next stack's install meanwhile.
#
#   tools/test_stacks.sh MAKE STACK [STACK ...]
#
# The suite of one stack leaves a core idle much of the time (ranks waiting on each other, on a
# stalled peer, on Slurm, on a cut link), and the next stack's install (pip, then the Horovod
# build, then its checks) is almost all CPU. So while stack N's suite runs, stack N+1 installs in
# the background at the lowest priority (nice 19: it gets a core only when the suite leaves one
# idle, about 1.5% of one when both are busy), its output kept in runs/install-<stack>.log and
# printed once stack N's suite is done. Stack N+1's suite starts only after its install ended; an
# install that failed fails `make test` with its log, as it would have in the foreground.
# The first stack installs in the foreground (`make test-stack` depends on the install's stamp).
set -uo pipefail

MAKE_CMD=${1:?usage: test_stacks.sh MAKE STACK [STACK ...]}
shift
STACKS=("$@")
mkdir -p runs
pending=""   # pid of the background install, if one runs

stop_background() {
  if [ -n "$pending" ] && kill -0 "$pending" 2>/dev/null; then
    kill -- "-$pending" 2>/dev/null || kill "$pending" 2>/dev/null
  fi
}
trap 'stop_background; exit 130' INT TERM

finish_install() {  # waits for the background install of stack $1 and reports it; fails like a foreground one
  local stack=$1 log="runs/install-$1.log" status=0
  echo "== install of stack $stack (ran in the background, nice 19, during the previous suite; $log) =="
  wait "$pending" || status=$?
  pending=""
  cat "$log"
  if [ "$status" -ne 0 ]; then
    echo "make test: the install of stack $stack failed (status $status); its log is above and in $log" >&2
    exit "$status"
  fi
}

status=0
for i in "${!STACKS[@]}"; do
  stack=${STACKS[$i]}
  [ "$i" -gt 0 ] && finish_install "$stack"
  "$MAKE_CMD" --no-print-directory install STACK="$stack" || exit $?
  next=${STACKS[$((i + 1))]:-}
  if [ -n "$next" ]; then
    # a session of its own, so that stop_background can end the whole install (pip, compiler, checks)
    setsid nice -n 19 "$MAKE_CMD" --no-print-directory install STACK="$next" > "runs/install-$next.log" 2>&1 &
    pending=$!
  fi
  "$MAKE_CMD" --no-print-directory test-stack STACK="$stack" || { status=$?; stop_background; exit "$status"; }
done
