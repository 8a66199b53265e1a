#!/usr/bin/env bash
# `make test` over several stacks: every stack's install first, side by side, then each stack's
# suite in turn, alone on the machine.
#
#   tools/test_stacks.sh MAKE STACK [STACK ...]
#
# The installs overlap because they wait on different things: pip on the network and the disk, the
# Horovod build on both cores. The later stacks install in the background while the first installs
# in the foreground; their output goes to runs/install-<stack>.log, printed once the first install
# is done, and an install that failed fails `make test` with its log, as in the foreground.
#
# No install runs beside a suite: the distributed tests' ranks synchronise every step, and a
# compiler or pip beside them slowed the keras2 distributed tests by about 96 s of 654 s in the idle
# scheduling class (`chrt --idle 0` and `ionice -c 3`), and by 130-145 s at nice 19 (docs/testing.md,
# "Measured").
set -uo pipefail

MAKE_CMD=${1:?usage: test_stacks.sh MAKE STACK [STACK ...]}
shift
STACKS=("$@")
mkdir -p runs
pending=()   # "pid:stack" of each background install

stop_background() {
  local entry
  for entry in "${pending[@]}"; do
    local pid=${entry%%:*}
    if kill -0 "$pid" 2>/dev/null; then
      kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null
    fi
  done
}
trap 'stop_background; exit 130' INT TERM

# A process group of its own for each background install (job control), so that stop_background
# ends the whole install (pip, compiler, checks).
set -m
for stack in "${STACKS[@]:1}"; do
  "$MAKE_CMD" --no-print-directory install STACK="$stack" > "runs/install-$stack.log" 2>&1 &
  pending+=("$!:$stack")
done
set +m

"$MAKE_CMD" --no-print-directory install STACK="${STACKS[0]}" || { status=$?; stop_background; exit "$status"; }

for entry in "${pending[@]}"; do
  pid=${entry%%:*} stack=${entry#*:} log="runs/install-${entry#*:}.log" status=0
  echo "== install of stack $stack (in the background, beside the install of ${STACKS[0]}; $log) =="
  wait "$pid" || status=$?
  cat "$log"
  if [ "$status" -ne 0 ]; then
    echo "make test: the install of stack $stack failed (status $status); its log is above and in $log" >&2
    stop_background
    exit "$status"
  fi
done
pending=()

for stack in "${STACKS[@]}"; do
  "$MAKE_CMD" --no-print-directory test-stack STACK="$stack" || exit $?
done
