"""Horovod's own Spark KerasEstimator and hvdkeras's, side by side on the same job.

Runs ``job.py`` alternately with each estimator's Python (H, h, H, h, ...: Horovod's, then hvdkeras's,
``--repeats`` times each), one fresh store per run, and prints a Markdown table of the medians of
``fit`` wall time and test accuracy, with the ratio of the medians and each pair's ratio; then the medians of each
estimator's first and second ``transform`` (rows/s) and of its model's ``predict`` in memory, with the ratios, and
the most CPU that other processes used during a run (``others_cores``, as ``benchmarks.spark_transform`` measures
it: over 0.2 of a core, the figures are not of record). Run it from the repository's root with
the keras2 stack's Python, which has hvdkeras (it writes the digits from ``digits_arrays()``)::

    .venv/bin/python benchmarks/spark_side_by_side/run.py \\
        --horovod-python /tmp/horovod-spark-venv/bin/python --hvdkeras-python .venv/bin/python

``/tmp/horovod-spark-venv`` is a throwaway venv with Horovod's estimator as it was released (Python 3.11,
tensorflow-cpu 2.15.1, keras 2.15.0, numpy 1.26.4, pyarrow 10.0.1, petastorm 0.12.1, pyspark 3.5,
h5py, cloudpickle, and Horovod 0.28.1's wheel built for TF 2.15.1 installed with ``--no-deps``);
docs/records/performance-details.md ("Horovod's Spark estimator side by side") says how it was built.
Each run's log and ``results.json`` go to ``--workdir``.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository's root: benchmarks.spark_transform
from benchmarks.spark_transform import BUSY_CORES, others_cores, others_cpu  # noqa: E402


def write_digits(path):
    import numpy as np

    from hvdkeras.training.data import digits_arrays

    pixels, labels = digits_arrays()
    np.savez(path, pixels=pixels, labels=labels)


def descendants(proc):
    """Waits for ``proc``; returns every pid its process tree had meanwhile (its Spark JVM outlives it briefly, no
    longer its child: it is not other work)."""
    import psutil

    seen = {proc.pid}
    while proc.poll() is None:
        try:
            seen.update(child.pid for child in psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.5)
    return seen


def run_job(python, impl, data, workdir, index, extra):
    store = os.path.join(workdir, f"store-{impl}-{index}")
    shutil.rmtree(store, ignore_errors=True)
    log = os.path.join(workdir, f"{impl}-{index}.log")
    env = dict(os.environ, PYSPARK_PYTHON=python)
    env.pop("PYTHONPATH", None)
    began, cpu = time.monotonic(), others_cpu()
    with open(log, "w") as out:
        proc = subprocess.Popen([python, os.path.join(HERE, "job.py"), "--impl", impl, "--data", data, "--store",
                                 store] + extra, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
        job = descendants(proc)
    seconds = round(time.monotonic() - began, 1)
    busy = others_cores(cpu, {pid: used for pid, used in others_cpu().items() if pid not in job}, seconds)
    with open(log) as f:
        results = [line.split("RESULT ", 1)[1] for line in f if "RESULT {" in line]
    if proc.returncode or not results:
        raise SystemExit(f"{impl} run {index} failed (exit {proc.returncode}); see {log}")
    result = json.loads(results[-1])
    result["process_seconds"], result["others_cores"] = seconds, busy
    print(f"{impl} #{index}: fit {result['fit_seconds']} s, accuracy {result['accuracy']}, "
          f"transform {result.get('transform_rows_per_s')} rows/s, predict {result.get('predict_rows_per_s')} rows/s,"
          f" process {seconds} s, other work {busy} cores", flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horovod-python", default="/tmp/horovod-spark-venv/bin/python")
    parser.add_argument("--hvdkeras-python", default=sys.executable)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/spark-side-by-side")
    parser.add_argument("job_args", nargs="*", help="passed to job.py after --, e.g. -- --epochs 5")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    data = os.path.join(args.workdir, "digits.npz")
    write_digits(data)
    runs = {"horovod": [], "hvdkeras": []}
    for index in range(args.repeats):
        runs["horovod"].append(run_job(args.horovod_python, "horovod", data, args.workdir, index, args.job_args))
        runs["hvdkeras"].append(run_job(args.hvdkeras_python, "hvdkeras", data, args.workdir, index, args.job_args))
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump(runs, f, indent=1)

    def median(impl, key):
        return statistics.median(r[key] for r in runs[impl])

    print()
    print("| estimator | versions | test accuracy (median; runs) | fit s (median; runs) |")
    print("|---|---|---|---|")
    for impl, name in (("horovod", "horovod.spark.keras"), ("hvdkeras", "hvdkeras.spark.keras")):
        v = runs[impl][0]["versions"]
        versions = ", ".join(f"{k} {v[k]}" for k in ("tensorflow", "keras", "pyspark", "pyarrow", "petastorm",
                                                       "numpy") if k in v)
        print(f"| `{name}` | {versions} | {median(impl, 'accuracy'):.4f} "
              f"({', '.join(str(r['accuracy']) for r in runs[impl])}) | {median(impl, 'fit_seconds'):.1f} "
              f"({', '.join(str(r['fit_seconds']) for r in runs[impl])}) |")
    pairs = [h["fit_seconds"] / k["fit_seconds"] for h, k in zip(runs["horovod"], runs["hvdkeras"])]
    print()
    ratio = median("horovod", "fit_seconds") / median("hvdkeras", "fit_seconds")
    print(f"fit time, Horovod's / hvdkeras's: {ratio:.2f} (medians); pairs: {', '.join(f'{p:.2f}' for p in pairs)}")
    if "transform_rows_per_s" in runs["hvdkeras"][0]:
        print_transforms(runs)
    worst = max(r["others_cores"] for impl in runs for r in runs[impl])
    print(f"other processes: at most {worst} cores in a run" + (f" (over {BUSY_CORES}: not figures of record)"
                                                                   if worst > BUSY_CORES else ""))


def print_transforms(runs):
    """The medians of each estimator's first and second transform and of predict, with the ratios to predict."""
    print()
    print(f"| estimator | first `transform` rows/s ({runs['hvdkeras'][0]['transform_rows']:,} rows) | again |"
          " `predict` in memory | first / `predict` | again / `predict` |")
    print("|---|---:|---:|---:|---:|---:|")
    for impl in ("horovod", "hvdkeras"):
        first = statistics.median(r["transform_rows_per_s"][0] for r in runs[impl])
        again = statistics.median(r["transform_rows_per_s"][1] for r in runs[impl])
        predict = statistics.median(r["predict_rows_per_s"] for r in runs[impl])
        print(f"| {impl} | {first:,.0f} | {again:,.0f} | {predict:,.0f} | {first / predict:.3f} |"
              f" {again / predict:.3f} |")


if __name__ == "__main__":
    main()
