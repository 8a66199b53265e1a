"""A default against its anchor, side by side: the digits job's training time with each value.

    .venv/bin/python tools/ab_defaults.py cycle  [--rounds 3]   # horovod.cycle_time_ms 10 vs 1 (Horovod's)
    .venv/bin/python tools/ab_defaults.py commit [--rounds 3]   # elastic.commit_every_batches 10 vs 1 (Horovod's)

Each round runs every value once, in alternating order, as a 2-rank job on this machine
(``horovodrun --gloo``; ``commit`` as an elastic job over ``localhost`` and ``127.0.0.1``, as
``tests/distributed/test_elastic.py`` runs one), and reads the training time the trainer
prints (``trained epochs 1-E in S s``, or for elastic jobs the time between the first and the
last epoch in ``metrics.jsonl``). Prints each value's seconds per round, the medians and the
per-round ratio. Run it on an otherwise idle machine.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
DIGITS = os.path.join(REPO, "configs", "digits.yaml")
CASES = {
    "cycle": ("horovod.cycle_time_ms", ["10", "1"], []),
    "commit": ("elastic.commit_every_batches", ["10", "1"], ["elastic.enabled=true"]),
}


def run(what: str, key: str, value: str, sets, workdir: str) -> float:
    args = ["--config", DIGITS, "--workdir", workdir, "--set", "trainer.verbose=0", "--set",
            "checkpoint.enabled=false", "--set", f"{key}={value}"]
    for s in sets:
        args += ["--set", s]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if what == "commit":
        hosts = os.path.join(workdir + "-hosts")
        with open(hosts, "w") as f:
            f.write("localhost:1\n127.0.0.1:1\n")
        env["HVDKERAS_HOSTS_FILE"] = hosts
        cmd = [HOROVODRUN, "-np", "2", "--min-np", "2", "--max-np", "2", "--gloo", "--host-discovery-script",
               f"{sys.executable} -m hvdkeras.discover_hosts"]
    else:
        cmd = [HOROVODRUN, "-np", "2", "-H", "localhost:2", "--gloo"]
    done = subprocess.run(cmd + [sys.executable, "-m", "hvdkeras.train"] + args, cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{key}={value} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    found = re.search(r"trained epochs \d+-\d+ in ([0-9.]+)s", done.stdout)
    if found:
        return float(found.group(1))
    from hvdkeras.common.workdir import read_metrics

    records = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    return sum(r["epoch_time_s"] for r in records)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=sorted(CASES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    key, values, sets = CASES[args.what]
    seconds = {v: [] for v in values}
    with tempfile.TemporaryDirectory(prefix=f"ab-{args.what}-", ignore_cleanup_errors=True) as base:
        for r in range(args.rounds):
            order = values if r % 2 == 0 else list(reversed(values))
            for v in order:
                seconds[v].append(run(args.what, key, v, sets, os.path.join(base, f"r{r}-{v}")))
            print(f"round {r + 1}: " + ", ".join(f"{key}={v}: {seconds[v][-1]:.2f}s" for v in values), flush=True)
    first, second = values
    ratios = [b / a for a, b in zip(seconds[first], seconds[second])]
    print(f"median: {key}={first}: {statistics.median(seconds[first]):.2f}s, {key}={second}:"
          f" {statistics.median(seconds[second]):.2f}s; per-round ratio {second}/{first}: "
          + ", ".join(f"{x:.3f}" for x in ratios) + f" (median {statistics.median(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
