"""What starting the ranks on Spark costs: ``python -m benchmarks.spark_start [--rounds 3] [--num-proc 2]``.

On ``local[N]`` (N = ``--num-proc``), one SparkSession, round by round in alternation, the wall time of:

* ``hvdkeras``: :func:`hvdkeras.spark.run`, the ranks as one barrier stage (:mod:`hvdkeras.spark.gang`);
* ``horovod``: Horovod's own ``horovod.spark.run`` with Gloo (its driver and task services),

each for a function that returns at once (``noop``) and for one that imports Horovod's TensorFlow ops and
initialises Horovod (``init``), the start every training rank pays. It prints each round and, last, one JSON
line of the medians and the ratios ``horovod / hvdkeras``. Figures go in docs/performance.md ("Starting the ranks
on Spark").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List


def noop() -> int:
    """A rank that does nothing."""
    return 0


def init() -> int:
    """A rank that starts Horovod: what every training rank does first."""
    import horovod.tensorflow as hvd

    hvd.init()
    return int(hvd.rank())


def _timed(run: Callable[[Callable[[], int]], Any], fn: Callable[[], int]) -> float:
    began = time.perf_counter()
    run(fn)
    return time.perf_counter() - began


def main(argv: List[str] | None = None) -> int:
    """Runs the rounds and prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-proc", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import horovod.spark
    from pyspark.sql import SparkSession

    import hvdkeras.spark

    spark = (SparkSession.builder.master(f"local[{args.num_proc}]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ways: Dict[str, Callable[[Callable[[], int]], Any]] = {
        "hvdkeras": lambda fn: hvdkeras.spark.run(fn, num_proc=args.num_proc, verbose=0),
        "horovod": lambda fn: horovod.spark.run(fn, num_proc=args.num_proc, use_gloo=True, verbose=0),
    }
    times: Dict[str, List[float]] = {}
    try:
        hvdkeras.spark.run(noop, num_proc=args.num_proc)  # the executors' Python asked once, outside the timing
        for round_ in range(args.rounds):
            for fn in (noop, init):
                for way, run in ways.items():
                    seconds = _timed(run, fn)
                    times.setdefault(f"{way}_{fn.__name__}", []).append(seconds)
                    print(f"round {round_ + 1}: {way} {fn.__name__} {seconds:.2f} s", flush=True)
    finally:
        spark.stop()
    medians = {name: round(statistics.median(values), 2) for name, values in times.items()}
    ratios = {fn: round(medians[f"horovod_{fn}"] / medians[f"hvdkeras_{fn}"], 2) for fn in ("noop", "init")}
    print(json.dumps({"rounds": args.rounds, "num_proc": args.num_proc, "median_s": medians,
                      "horovod_over_hvdkeras": ratios}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
