"""One driver on local[2] for a stack's Spark tests: one SparkSession, one TensorFlow import, for every check.

``spark_local_check.py WORK [--estimator] [--tuning] [--scenarios NAME,...] [--stream] [--examples NAME,...]``
runs, in this order:

* ``--estimator``: the KerasEstimator's checks (``spark_estimator_check.run_checks``, test_spark.py), the store a
  folder under WORK;
* ``--quick-start``: docs/spark.md's quick start, ``quick_start`` of ``examples/spark/keras_spark_digits.py``, in
  this session (test_spark.py);
* ``--tuning``: Spark ML's ``Pipeline``, ``TrainValidationSplit`` and ``CrossValidator`` with the estimator
  (``spark_tuning_check.run_tuning_checks``, test_spark_tuning.py);
* ``--scenarios``: Horovod's own Spark Keras scenarios by name (``horovod_spark_keras_check.run_scenarios``,
  test_horovod_spark_keras.py);
* ``--stream``: a fit on a table three times larger than the memory each rank may use, streamed, and the same rows
  held in memory, which cannot fit (``spark_stream_check.run_stream_checks``, test_spark_stream.py);
* ``--examples``: Horovod's published Spark examples by name, from ``examples/horovod/`` (``<NAME>.py``), each as
  ``__main__`` with its arguments (:data:`EXAMPLES`), its data written offline first (:data:`OFFLINE_DATA`), in a
  folder of its own under WORK, last: an example stops the SparkSession when it ends (the next one's
  ``getOrCreate`` starts another).

It runs as a user's script in an activated venv does: the executors start ``python3`` from ``PATH``, the venv's
(tests/harness/spark_driver.py sets it so), and nothing sets ``PYSPARK_PYTHON``.

A driver's session, its executors' Python workers and its TensorFlow take 15-25 s to start on two cores, once
here instead of once for each. Prints ``RESULT {"estimator": {...}, "tuning": {...}, "horovod": {...},
"stream": {...}, "examples": {...}, "seconds": {...}}`` with the parts asked for and each part's seconds
(tests/harness/spark_driver.py runs it, from WORK).
"""
import argparse
import importlib
import json
import os
import sys
import time

import cloudpickle

from hvdkeras.common import processes

ARGS = argparse.ArgumentParser()
ARGS.add_argument("work")
ARGS.add_argument("--estimator", action="store_true")
ARGS.add_argument("--tuning", action="store_true")
ARGS.add_argument("--quick-start", action="store_true")
ARGS.add_argument("--scenarios", default="")
ARGS.add_argument("--examples", default="")
ARGS.add_argument("--stream", action="store_true")
OPTIONS = ARGS.parse_args()

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLES_DIR = os.path.join(REPO, "examples", "horovod")
QUICK_START = os.path.join(REPO, "examples", "spark", "keras_spark_digits.py")
# Each example's arguments, short; {work} is its folder.
EXAMPLES = {"keras_spark_mnist": ["--num-proc", "2", "--epochs", "1", "--work-dir", "{work}/store",
                                  "--data-dir", "{work}/data"],
            "keras_spark_rossmann_estimator": ["--num-proc", "2", "--epochs", "1", "--data-dir", "file://{work}/data",
                                               "--work-dir", "{work}/store", "--local-checkpoint-file",
                                               "{work}/checkpoint", "--local-submission-csv", "{work}/submission.csv"]}
# The examples whose data a script of examples/horovod/ writes first, into {work}/data: its function, which takes the
# folder and returns what it wrote (the example itself reads a dataset it would download).
OFFLINE_DATA = {"keras_spark_rossmann_estimator": ("offline_rossmann.py", "write_csvs")}
from pyspark.sql import SparkSession  # noqa: E402
from session_start import in_background  # noqa: E402 (this script's folder is first on sys.path)

began = time.monotonic()
start_session = in_background(
    SparkSession.builder.master("local[2]").appName("hvdkeras-spark-local-check").config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "4"))
import hvdkeras.runtime.compat  # noqa: E402,F401 (TensorFlow and Keras imported while the session starts)


def run_example(name, work):
    """Horovod's example ``name`` as ``__main__`` with its :data:`EXAMPLES` arguments, in ``work`` (created, with its
    ``data`` and ``store`` folders, its data written first where :data:`OFFLINE_DATA` says how): what it printed (the
    ranks' lines included), what it left in ``work`` and the text of its CSV files there, and what its offline data
    script returned (``offline``)."""
    import contextlib
    import io
    import runpy
    import time

    for folder in ("data", "store"):
        os.makedirs(os.path.join(work, folder), exist_ok=True)
    offline = None
    if name in OFFLINE_DATA:
        script, function = OFFLINE_DATA[name]
        offline = runpy.run_path(os.path.join(EXAMPLES_DIR, script))[function](os.path.join(work, "data"))
    path = os.path.join(EXAMPLES_DIR, f"{name}.py")
    argv, out, began = sys.argv, io.StringIO(), time.time()
    sys.argv = [path] + [arg.format(work=work) for arg in EXAMPLES[name]]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = argv
    # The ranks run in their Spark tasks' folder, this driver's (WORK): the example's relative paths land there.
    found = {"output": out.getvalue(), "seconds": time.time() - began, "files": {}, "csv": {}, "offline": offline,
             "tensorboard": os.path.isdir(os.path.join(os.getcwd(), "logs", "train"))}
    for root, dirs, files in os.walk(work):
        dirs[:] = [d for d in dirs if d not in ("data",) and not d.startswith("intermediate_")]
        found["files"][os.path.relpath(root, work)] = sorted(files + dirs)
        for file in files:
            if file.endswith(".csv"):
                with open(os.path.join(root, file)) as f:
                    found["csv"][os.path.relpath(os.path.join(root, file), work)] = f.read()
    return found


def check_module(name):
    """One of this folder's check scripts, imported; what it defines (a callback a rank runs) travels to the ranks
    by value, as it did when that script ran as ``__main__``: the ranks cannot import this folder."""
    module = importlib.import_module(name)
    cloudpickle.register_pickle_by_value(module)
    return module


session = start_session()
result: dict = {"seconds": {}}


def lap(part):
    """The seconds since the last lap, as ``result["seconds"][part]`` (read in a stack's run, docs/testing.md)."""
    global began
    now = time.monotonic()
    result["seconds"][part] = round(now - began, 1)
    began = now


lap("session")
try:
    if OPTIONS.estimator:
        os.makedirs(os.path.join(OPTIONS.work, "store"), exist_ok=True)
        result["estimator"] = check_module("spark_estimator_check").run_checks(session,
                                                                               os.path.join(OPTIONS.work, "store"))
        lap("estimator")
    if OPTIONS.quick_start:
        import runpy

        accuracy, rows, path, loaded = runpy.run_path(QUICK_START)["quick_start"](
            session, os.path.join(OPTIONS.work, "quick_start"))
        result["quick_start"] = {"accuracy": accuracy, "rows": rows, "saved": os.listdir(path.removeprefix("file://")),
                                 "loaded": type(loaded).__name__, "outputs": loaded.getOutputCols()}
        lap("quick_start")
    if OPTIONS.tuning:
        result["tuning"] = check_module("spark_tuning_check").run_tuning_checks(session,
                                                                                os.path.join(OPTIONS.work, "tuning"))
        lap("tuning")
    if OPTIONS.scenarios:
        result["horovod"] = check_module("horovod_spark_keras_check").run_scenarios(
            session, os.path.join(OPTIONS.work, "horovod"), OPTIONS.scenarios.split(","))
        lap("scenarios")
    if OPTIONS.stream:
        result["stream"] = check_module("spark_stream_check").run_stream_checks(
            session, os.path.join(OPTIONS.work, "stream"), negative=True)
        lap("stream")
    if OPTIONS.examples:
        result["examples"] = {"seconds": 0.0}
        for name in OPTIONS.examples.split(","):
            result["examples"][name] = run_example(name, os.path.join(OPTIONS.work, "examples", name))
            result["examples"]["seconds"] += result["examples"][name]["seconds"]
        lap("examples")
finally:
    session.stop()
print("RESULT " + json.dumps(result), flush=True)
processes.exit_now(0)  # without the interpreter's teardown: most of a second with TensorFlow imported
