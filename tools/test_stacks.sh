#!/usr/bin/env bash
# `make test` over several stacks: every stack's install first, side by side, then every stack's
# suite, side by side.
#
#   tools/test_stacks.sh MAKE STACK [STACK ...]
#
# The installs overlap because they wait on different things: pip on the network and the disk, the
# Horovod build on both cores. The later stacks install in the background while the first installs
# in the foreground; their output goes to runs/install-<stack>.log, printed once the first install
# is done, and an install that failed fails `make test` with its log, as in the foreground.
#
# No install runs beside a suite: a compiler beside the distributed tests slowed them by about 15%
# even in the idle scheduling class (docs/records/test-timings.md), for nothing of its own to gain.
# The suites themselves do run side by side, the same way (the later ones' output in
# runs/test-<stack>.log, printed when the first is done): a suite alone keeps the two cores busy
# about 80% of its time (its ranks start, wait for a peer, a timeout, a link), and two suites fill
# each other's gaps. Measured on this machine (docs/records/test-timings.md): both distributed suites side by side
# took 1668 s where one after the other took 1897 s, every test passing. What the machine has once,
# the lab's hosts, one suite at a time holds (tests/harness/lab_lock.py). The suites in the background
# run their distributed tests first (ORDER=distributed-first, Makefile), so that the unit tests, which
# keep both cores busy, run beside the other suite's distributed tests, not beside each other's.
set -uo pipefail

MAKE_CMD=${1:?usage: test_stacks.sh MAKE STACK [STACK ...]}
shift
STACKS=("$@")
mkdir -p runs
pending=()   # "pid:stack" of each background install, then of each background suite

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

# start_background LOG TARGET [ARG ...]: `make TARGET STACK=<stack> ARG...` for every stack but the first,
# its output in runs/LOG-<stack>.log, each in a process group of its own (job control), so that
# stop_background ends all of it (pip, compiler, checks; pytest and its ranks).
start_background() {
  local log=$1 target=$2 stack
  shift 2
  set -m
  for stack in "${STACKS[@]:1}"; do
    "$MAKE_CMD" --no-print-directory "$target" STACK="$stack" "$@" > "runs/$log-$stack.log" 2>&1 &
    pending+=("$!:$stack")
  done
  set +m
}

start_background install install

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

for stack in "${STACKS[@]:1}"; do
  echo "== test suite on stack $stack: in the background, beside ${STACKS[0]}'s; its output in runs/test-$stack.log =="
done
start_background test test-stack ORDER=distributed-first

failed=()
# The first suite prints as it goes and is kept in runs/test-<stack>.log too, like the others, so that the
# end can name every failed test: a CI page that shows the head and the tail of a long output showed the
# failed lanes' counts and not which test failed in the second one.
"$MAKE_CMD" --no-print-directory test-stack STACK="${STACKS[0]}" 2>&1 | tee "runs/test-${STACKS[0]}.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("${STACKS[0]}")
for entry in "${pending[@]}"; do
  pid=${entry%%:*} stack=${entry#*:} log="runs/test-${entry#*:}.log" status=0
  wait "$pid" || status=$?
  echo "== test suite on stack $stack (in the background, beside ${STACKS[0]}'s; $log) =="
  cat "$log"
  [ "$status" -eq 0 ] || failed+=("$stack")
done
pending=()
if [ "${#failed[@]}" -ne 0 ]; then
  for stack in "${failed[@]}"; do  # pytest's short summary lines (-rfE), or the lane's last line
    lines=$(grep -E '^(FAILED|ERROR) ' "runs/test-$stack.log" || tail -n 1 "runs/test-$stack.log")
    printf '%s\n' "$lines" | sed "s/^/make test: [$stack] /" >&2
  done
  echo "make test: the suite failed on stack(s) ${failed[*]}; each one's output is above" >&2
  exit 1
fi
