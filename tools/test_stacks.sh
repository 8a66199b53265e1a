#!/usr/bin/env bash
# `make test` over several stacks: each stack's suite in turn, the next stack's install meanwhile.
#
#   tools/test_stacks.sh MAKE STACK [STACK ...]
#
# The suite of one stack leaves a core idle much of the time (ranks waiting on each other, on a
# stalled peer, on Slurm, on a cut link), and the next stack's install (pip, then the Horovod
# build, then its checks) is almost all CPU. So while stack N's suite runs, stack N+1 installs in
# the background at the lowest priority (nice 19 and the idle I/O class: it gets a core only when
# the suite leaves one idle, about 1.5% of one when both are busy), its output kept in runs/install-<stack>.log and
# printed once stack N's suite is done. Stack N+1's suite starts only after its install ended; an
# install that failed fails `make test` with its log, as it would have in the foreground.
# The first stack installs in the foreground (`make test-stack` depends on the install's stamp).
set -uo pipefail

MAKE_CMD=${1:?usage: test_stacks.sh MAKE STACK [STACK ...]}
shift
STACKS=("$@")
mkdir -p runs
pending=""   # pid of the background install, if one runs
# the idle I/O class as well where ionice exists: unpacking TensorFlow writes about 1.5 GB
IDLE_IO=$(command -v ionice >/dev/null 2>&1 && echo "ionice -c 3" || true)

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
    # A process group of its own (job control), so that stop_background can end the whole install
    # (pip, compiler, checks); but the same session: with the kernel's autogroup scheduling
    # (sched_autogroup_enabled=1, the default on desktops and on these machines) nice only ranks
    # processes within one session, and a new session (setsid) would get a full share against the
    # suite's (measured: the keras2 unit tests took 60 s instead of 29 s beside a setsid install).
    set -m
    $IDLE_IO nice -n 19 "$MAKE_CMD" --no-print-directory install STACK="$next" > "runs/install-$next.log" 2>&1 &
    pending=$!
    set +m
  fi
  "$MAKE_CMD" --no-print-directory test-stack STACK="$stack" || { status=$?; stop_background; exit "$status"; }
done
