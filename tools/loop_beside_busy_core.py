"""Runs pytest on the same tests again and again beside a busy core, to find flaky tests.

    .venv/bin/python tools/loop_beside_busy_core.py --runs 5 tests/distributed/test_faults_two_ranks.py
    .venv-keras3/bin/python tools/loop_beside_busy_core.py --runs 3 --busy 0 tests/distributed/test_elastic.py

A spinner (a plain Python busy loop at normal priority, ``--busy`` of them, default 1) takes one
core of two for the whole loop, as a noisy neighbour would; each run is ``python -m pytest -q -rs
-p no:cacheprovider <args>`` with this interpreter. Prints one line per run (status, seconds, the
failed tests) and a summary; exits 1 if any run failed. Every run's output is kept in ``--out``
(default runs/loop/). Tests must pass here: a test that needs a quiet machine says so and
measures nothing in time (docs/testing.md).
"""
import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _spin():
    while True:
        pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="how many times to run the tests (default 5)")
    parser.add_argument("--busy", type=int, default=1, help="busy-loop processes beside the tests (default 1)")
    parser.add_argument("--out", default=os.path.join(REPO, "runs", "loop"), help="where each run's output goes")
    parser.add_argument("pytest_args", nargs="+", help="test files or node ids, and pytest options after --")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    failed_runs = 0
    try:
        for run in range(1, args.runs + 1):
            tic = time.time()
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                                   *args.pytest_args], cwd=REPO, capture_output=True, text=True)
            took = time.time() - tic
            log = os.path.join(args.out, f"run{run}.log")
            with open(log, "w") as f:
                f.write(proc.stdout + proc.stderr)
            failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
            summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
            status = "ok" if proc.returncode == 0 else f"FAILED ({proc.returncode})"
            print(f"run {run}/{args.runs}: {status} in {took:.0f}s, beside {args.busy} busy core(s): {summary}"
                  + (f"; failed: {', '.join(failed)}" if failed else "") + f" ({log})", flush=True)
            failed_runs += proc.returncode != 0
    finally:
        for spinner in spinners:
            spinner.terminate()
    print(f"{args.runs - failed_runs} of {args.runs} runs passed")
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
