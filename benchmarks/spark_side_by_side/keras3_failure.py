"""How Horovod's own ``horovod.spark.keras.KerasEstimator`` fails on the keras3 stack.

Run with the Python of a THROWAWAY copy of the keras3 stack (never the repo's .venv-keras3): the
packages of ``.venv-keras3/bin/pip freeze`` (TensorFlow 2.21, Keras 3, NumPy 2, pyarrow 26, pyspark 4.3)
plus Horovod 0.28.1's wheel built for TF 2.21 (``--no-deps``) and ``petastorm==0.12.1``::

    /tmp/horovod-spark-keras3-venv/bin/python keras3_failure.py --data /tmp/spark-side-by-side/digits.npz

Each step runs in its own Python (a fresh interpreter, as the ranks would) and prints the last line of
its traceback (the error), or ``ok``:

* ``fit``: ``job.py --impl horovod --epochs 1`` on local[2], the same job as ``run.py``'s;
* ``petastorm``: what each rank imports to read the store's Parquet (``petastorm.tf_utils``);
* ``compile``: the driver's next step after the data (``KerasEstimator._compile_model``), with a
  Keras 3 model and optimizer, without Spark.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

COMPILE = """
import keras
import horovod.spark.keras as hvd
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
est = hvd.KerasEstimator(num_proc=2, model=model, optimizer=keras.optimizers.Adam(0.001),
                         loss="categorical_crossentropy", metrics=["accuracy"],
                         feature_cols=["features"], label_cols=["label_vec"])
est._compile_model(est._get_keras_utils())
"""


def step(name, argv, env=None):
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    if proc.returncode == 0:
        print(f"{name}: ok")
        return
    tail = lines[errors[-1]:] if errors else lines[-5:]
    where = [line.strip() for line in tail if line.strip().startswith("File ")][-1:]
    print(f"{name}: exit {proc.returncode}: {tail[-1]}" + (f"\n    at {where[0]}" if where else ""), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the digits .npz that run.py writes")
    args = parser.parse_args()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2")
    import horovod
    import keras
    import numpy
    import pyarrow
    import pyspark
    import tensorflow

    print(f"python {sys.version.split()[0]}, tensorflow {tensorflow.__version__}, keras {keras.__version__}, "
          f"numpy {numpy.__version__}, pyarrow {pyarrow.__version__}, pyspark {pyspark.__version__}, "
          f"horovod {horovod.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as store:
        step("fit", [sys.executable, os.path.join(HERE, "job.py"), "--impl", "horovod", "--data", args.data,
                     "--store", store, "--epochs", "1"], env)
    step("petastorm", [sys.executable, "-c", "import petastorm.tf_utils"], env)
    step("compile", [sys.executable, "-c", COMPILE], env)


if __name__ == "__main__":
    main()
