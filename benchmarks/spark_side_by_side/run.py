"""Horovod's own Spark KerasEstimator and hvdkeras's, side by side on the same job.

Runs ``job.py`` alternately with each estimator's Python (H, h, H, h, ...: Horovod's, then hvdkeras's,
``--repeats`` times each), one fresh store per run, and prints a Markdown table of the medians of
``fit`` wall time and test accuracy, with the ratio of the medians and each pair's ratio. Run it with
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


def write_digits(path):
    import numpy as np

    from hvdkeras.training.data import digits_arrays

    pixels, labels = digits_arrays()
    np.savez(path, pixels=pixels, labels=labels)


def run_job(python, impl, data, workdir, index, extra):
    store = os.path.join(workdir, f"store-{impl}-{index}")
    shutil.rmtree(store, ignore_errors=True)
    log = os.path.join(workdir, f"{impl}-{index}.log")
    env = dict(os.environ, PYSPARK_PYTHON=python)
    env.pop("PYTHONPATH", None)
    began = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.run([python, os.path.join(HERE, "job.py"), "--impl", impl, "--data", data, "--store", store]
                              + extra, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    seconds = round(time.monotonic() - began, 1)
    with open(log) as f:
        results = [line.split("RESULT ", 1)[1] for line in f if "RESULT {" in line]
    if proc.returncode or not results:
        raise SystemExit(f"{impl} run {index} failed (exit {proc.returncode}); see {log}")
    result = json.loads(results[-1])
    result["process_seconds"] = seconds
    print(f"{impl} #{index}: fit {result['fit_seconds']} s, accuracy {result['accuracy']}, "
          f"process {seconds} s", flush=True)
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


if __name__ == "__main__":
    main()
