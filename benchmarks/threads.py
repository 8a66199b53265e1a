"""Where a process's CPU goes, thread by thread: ``python -m benchmarks.threads PID [PID ...] --seconds 5``.

Reads each thread's user and system time from ``/proc/<pid>/task/<tid>/stat`` at the
start and end of the interval and prints the busiest threads of every process as a
share of one core, with the thread's name (TensorFlow names its pools, e.g.
``tf_inter_op``; Horovod's background thread and Gloo's keep the process's name) and,
with ``--stacks``, the innermost frames of each busy thread from ``gdb`` (as root).

Used to find which thread besides the training thread takes a core under
``horovodrun`` (see docs/performance.md, "Why figures on this host come in steps").
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import time

TICKS = os.sysconf("SC_CLK_TCK")


def thread_times(pid: int) -> dict[int, tuple[str, float]]:
    """``{tid: (name, cpu seconds)}`` of every thread of ``pid`` now."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / TICKS)
    return out


def busy_threads(before: dict, after: dict, seconds: float) -> list[tuple[int, str, float]]:
    """``(tid, name, share of one core)`` over the interval, busiest first."""
    rows = [(tid, name, (cpu - before.get(tid, (name, 0.0))[1]) / seconds) for tid, (name, cpu) in after.items()]
    return sorted(rows, key=lambda r: -r[2])


def stacks(pid: int, tids: list[int], frames: int = 8) -> dict[int, list[str]]:
    """The innermost ``frames`` function names of each thread in ``tids``, from one ``gdb`` attach."""
    if not shutil.which("gdb"):
        return {}
    res = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt " + str(frames)],
                         capture_output=True, text=True, timeout=120)
    found, current = {}, None
    for line in res.stdout.splitlines():
        head = re.match(r"Thread \d+ \(Thread 0x[0-9a-f]+ \(LWP (\d+)\)", line)
        if head:
            current = int(head.group(1))
            found[current] = []
            continue
        frame = re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?(\S+)", line)
        if frame and current is not None:
            found[current].append(frame.group(1))
    return {tid: found.get(tid, []) for tid in tids}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.threads", description=__doc__.split("\n")[0])
    parser.add_argument("pids", nargs="+", type=int)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument("--stacks", action="store_true", help="also print each busy thread's innermost frames")
    args = parser.parse_args(argv)
    before = {pid: thread_times(pid) for pid in args.pids}
    time.sleep(args.seconds)
    after = {pid: thread_times(pid) for pid in args.pids}  # all read before gdb stops any of them
    for pid in args.pids:
        rows = busy_threads(before[pid], after[pid], args.seconds)
        total = sum(r[2] for r in rows)
        print(f"pid {pid}: {total:.2f} cores over {args.seconds:g}s, {len(rows)} threads")
        top = [r for r in rows[:args.top] if r[2] > 0.01]
        frames = stacks(pid, [r[0] for r in top]) if args.stacks else {}
        for tid, name, share in top:
            where = " <- ".join(frames.get(tid, [])[:6])
            print(f"  {tid:>8} {name:16} {share:5.2f} cores  {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
