"""What starting two ranks costs on Ray, beside horovodrun and the Spark gang: ``python -m benchmarks.ray_start``.

Round by round in alternation, the wall time until two ranks have initialised Horovod (imported its TensorFlow ops,
``hvd.init()``) and ended, of:

* ``ray``: :class:`hvdkeras.ray.RayExecutor` (``start``, ``run``, ``shutdown``) on a one-node Ray cluster that this
  benchmark starts first (``ray start --head``, not timed: a Ray cluster outlives its jobs) and stops at the end;
* ``horovodrun``: ``horovodrun -np 2 -H localhost:2 --gloo python -c ...``;
* ``spark``: :func:`hvdkeras.spark.run` on ``local[2]`` (one SparkSession, started before the rounds).

It prints each round and, last, one JSON line of the medians and each one's ratio to ``horovodrun``'s. Figures go in
docs/performance.md ("Starting the ranks on Ray").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List

INIT = "import horovod.tensorflow as hvd; hvd.init(); assert hvd.size() == 2"


def init() -> int:
    """A rank that starts Horovod: what every training rank does first."""
    import horovod.tensorflow as hvd

    hvd.init()
    return int(hvd.rank())


def _timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-spark", action="store_true", help="leave the Spark gang out")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    subprocess.run([ray_bin, "start", "--head", "--port", "6391", "--num-cpus", "2", "--include-dashboard=false",
                    "--disable-usage-stats"], check=True, capture_output=True, env=env)
    try:
        import ray

        from hvdkeras.ray import RayExecutor

        ray.init(address="auto", logging_level="ERROR", log_to_driver=False)

        def on_ray() -> None:
            executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2, cpus_per_worker=1)
            executor.start(extra_env_vars={"TF_CPP_MIN_LOG_LEVEL": "2"})
            try:
                assert sorted(executor.run(init)) == [0, 1]
            finally:
                executor.shutdown()

        def on_horovodrun() -> None:
            horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
            subprocess.run([horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-c", INIT],
                           check=True, capture_output=True, env=env)

        rows: Dict[str, Callable[[], None]] = {"ray": on_ray, "horovodrun": on_horovodrun}
        if not args.no_spark:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            from pyspark.sql import SparkSession

            from hvdkeras import spark as hvd_spark

            SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
            rows["spark"] = lambda: hvd_spark.run(init, num_proc=2)
        times: Dict[str, List[float]] = {name: [] for name in rows}
        for round_ in range(args.rounds):
            order = list(rows) if round_ % 2 == 0 else list(reversed(rows))
            for name in order:
                times[name].append(_timed(rows[name]))
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in rows), flush=True)
        medians = {name: round(statistics.median(t), 2) for name, t in times.items()}
        print(json.dumps({"medians_s": medians, "of_horovodrun": {n: round(m / medians["horovodrun"], 2)
                                                                 for n, m in medians.items()}}))
    finally:
        subprocess.run([ray_bin, "stop", "--force"], capture_output=True, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
