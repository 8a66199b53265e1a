"""Run by test_spark_cluster.py as the driver of lab/spark.py's standalone cluster (its environment: ClusterInfo.env()).

``spark_cluster_check.py WORK ENDPOINT [--scenarios NAME,...]`` (WORK on the filesystem both hosts share, ENDPOINT
moto's S3 server at the launcher's address): ``SparkSession.builder.getOrCreate()`` joins the cluster (the driver's
spark-defaults.conf names it), with the S3 server and its credentials in the driver's and the executors' environment
(``spark.executorEnv.*``, as a cluster's jobs get theirs when no instance profile gives them), then KerasEstimator
fits of two ranks, one per host, on a small model, the store ``s3://bucket/store``:

* ``quiet``: a fit that nobody disturbs: each rank records where it ran (its rank, an allreduce of every rank, its
  hostname, its address on the lab's link and its network namespace) and the GPU Spark assigned its task (the
  lab's stand-ins) and what it made visible; it keeps its Parquet for a second ``prepare``'s rows;
* ``retried``: the same fit with ``use_gpu=False`` and ``max_retries=1``: the executor JVM under rank 1 is SIGKILLed
  in epoch 2 and rank 1 itself in epoch 3; Spark starts the ranks again after the first, from the bucket's last
  checkpoint, and the fit ends in one line after the second (a retry after a rank's own exit: Connect's test);
* ``resumed``: the user's next fit with the same run_id resumes from the bucket, trains the last epoch only and
  ends on the quiet fit's weights; its model transforms, and saved at an ``s3://`` path and loaded predicts the same;
* the retried and resumed fits pass Horovod's ``checkpoint_callback``, a ``BestModelCheckpoint`` on the training
  loss with ``mode="max"``: the first epoch's model is the best, so the resumed fit, which trains only the last
  epoch, returns it only when the retried starts' best came back from the bucket with its score;
* ``--archive`` a packed environment, ``--hidden`` the folders the hosts cannot see (this checkout and its venv):
  the executors unpack it as ``./environment`` (``spark.archives``) and run its Python, as PySpark's guide ships a
  job's packages; each rank of the quiet fit says which Python it ran, where it imported Horovod, TensorFlow and
  hvdkeras from, and whether it saw any hidden folder;
* ``num_proc=3`` on the cluster's 2 task slots (``spark.cores.max``): the one-line error and how long it took;
* ``--estimator-fit``: the two-output fit of weighted rows with a validation column, against one process, and its
  transform (``spark_estimator_check.fit_check`` and ``transform_check``, a folder store under WORK);
* ``--tuning``: Spark ML's ``Pipeline`` and ``TrainValidationSplit`` with the estimator
  (``spark_tuning_check.run_tuning_checks``, a folder store under WORK);
* ``--stream``: a fit on a table three times larger than the memory each rank may use, each rank in a memory cgroup
  of its own on its host (``spark_stream_check.run_stream_checks``);
* ``--scenarios``: Horovod's own Spark Keras scenarios whose backend trains in the driver
  (``horovod_spark_keras_check.run_scenarios``, a folder store under WORK).

One driver (one SparkSession, one set of executors) for every check: each costs 10-20 s to start.
Prints ``RESULT {...}`` (what test_spark_cluster.py asserts on).
"""
import argparse
import glob
import importlib
import json
import os
import signal
import sys
import tempfile
import time

import boto3
import cloudpickle
import numpy as np
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from session_start import in_background  # this script's folder is first on sys.path

from hvdkeras.common import processes

SECRET = "hvdkeras-test-secret-key-not-in-any-file"
BUCKET = "bucket"
ROWS = 192


def s3_environment(endpoint, work):
    """The variables that find the S3 server and its credentials, as a job finds S3 (the endpoint, dummy keys), and
    put the ranks' local folders in ``work/tmp``, where no other job's ranks are; set in this process too."""
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "hvdkeras-test", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "TMPDIR": tmp}
    os.environ.update(env)
    tempfile.tempdir = tmp
    return env


ARGS = argparse.ArgumentParser()
ARGS.add_argument("work")
ARGS.add_argument("endpoint")
ARGS.add_argument("--scenarios", default="")
ARGS.add_argument("--archive", default="", help="a packed environment: the executors run it (spark.archives)")
ARGS.add_argument("--hidden", default="", help="the folders the hosts cannot see, os.pathsep between them")
ARGS.add_argument("--estimator-fit", action="store_true")
ARGS.add_argument("--tuning", action="store_true")
ARGS.add_argument("--stream", action="store_true")
OPTIONS = ARGS.parse_args()

driver_addr = os.environ["SPARK_LOCAL_IP"]
HIDDEN = [p for p in OPTIONS.hidden.split(os.pathsep) if p]
began = time.time()
builder = SparkSession.builder.appName("hvdkeras-spark-cluster-check")
if OPTIONS.archive:  # PySpark's guide, in a script: the executors unpack it as ./environment and run its Python
    os.environ["PYSPARK_PYTHON"] = "./environment/bin/python"
    builder = builder.config("spark.archives", f"{OPTIONS.archive}#environment").config(
        "spark.pyspark.python", "./environment/bin/python")
for name, value in s3_environment(OPTIONS.endpoint, OPTIONS.work).items():
    builder = builder.config(f"spark.executorEnv.{name}", value)
# The session starts (a JVM, the driver's copy of the shipped environment unpacked, the executors) while TensorFlow is
# imported below, which takes a few seconds that the unpacking leaves a core for.
start_session = in_background(builder)

from spark_estimator_check import prepared_twice_alike  # noqa: E402

import hvdkeras.spark.keras as hvd_keras  # noqa: E402
from hvdkeras import spark as hvd_spark  # noqa: E402
from hvdkeras.callbacks.model_checkpoint import BestModelCheckpoint  # noqa: E402
from hvdkeras.common.errors import HvdkerasError  # noqa: E402
from hvdkeras.runtime.compat import keras  # noqa: E402
from hvdkeras.spark.common.store import Store  # noqa: E402
from hvdkeras.spark.runner import _registered_slots  # noqa: E402


def where(driver_addr):
    """Where this rank runs: its rank, size and local rank, the sum of every rank's rank (one allreduce), its host,
    its address on the lab's link towards ``driver_addr`` and its network namespace."""
    import socket

    import horovod.tensorflow as hvd
    import tensorflow as tf

    total = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum, name="spark_cluster_check")
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((driver_addr, 9))  # no packet sent: the route picks this host's address on the link
    addr = probe.getsockname()[0]
    probe.close()
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "sum": float(total.numpy()),
            "hostname": socket.gethostname(), "addr": addr, "netns": os.readlink("/proc/self/ns/net")}


def python_of_rank(hidden):
    """The Python this rank runs and where its packages come from; whether it sees each folder of ``hidden``."""
    import horovod
    import tensorflow

    import hvdkeras

    return {"executable": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(),
            "modules": {m.__name__: m.__file__ for m in (horovod, tensorflow, hvdkeras)},
            "sees": {path: bool(os.path.exists(path) and os.listdir(path)) for path in hidden}}


class KillRankOnce(keras.callbacks.Callback):
    """SIGKILLs rank 1's process (or, with ``executor``, the executor JVM it runs under, and then waits until the rank
    is told) at the third batch of epoch ``epoch`` (0-based), once: a marker file remembers."""

    def __init__(self, marker, epoch=1, executor=False):
        super().__init__()
        self.marker, self.at_epoch, self.executor, self.epoch = marker, epoch, executor, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        import horovod.tensorflow as hvd_tf
        import psutil

        if self.epoch == self.at_epoch and batch == 2 and hvd_tf.rank() == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            if not self.executor:
                os.kill(os.getpid(), signal.SIGKILL)
            (jvm,) = [p.pid for p in psutil.Process().parents()
                      if "CoarseGrainedExecutorBackend" in " ".join(p.cmdline())]
            os.kill(jvm, signal.SIGKILL)
            # The rank learns that its executor went through its task's output closing (the product's chain:
            # pyspark's daemon, the task, hvdkeras.common.launcher_watch), which takes a moment; it must not train
            # on meanwhile, or on a slow machine the gang finishes the epoch and checkpoints it before it stops.
            from hvdkeras.common import signals

            flag, deadline = signals.process_flag(), time.monotonic() + 120
            while flag is not None and not flag.pending and time.monotonic() < deadline:
                time.sleep(0.05)
            if flag is None or not flag.pending:
                raise RuntimeError("rank 1 was not told in 120 s that its executor had gone")


class RecordRank(keras.callbacks.Callback):
    """Each rank writes ``<folder>/devices-<tag>-rank<r>.json`` as the fit begins: the GPU addresses Spark assigned
    its task, the GPUs it made visible, and where it runs (:func:`where`)."""

    def __init__(self, folder, tag, driver_addr, hidden=()):
        super().__init__()
        self.folder, self.tag, self.driver_addr, self.hidden = folder, tag, driver_addr, hidden

    def on_train_begin(self, logs=None):
        import socket

        import horovod.tensorflow as hvd_tf

        from hvdkeras.spark.common import gpus

        record = {"rank": hvd_tf.rank(), "host": socket.gethostname(), "assigned": gpus.assigned(),
                  "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "where": where(self.driver_addr),
                  "python": python_of_rank(self.hidden)}
        with open(os.path.join(self.folder, f"devices-{self.tag}-rank{hvd_tf.rank()}.json"), "w") as f:
            json.dump(record, f)


def devices(folder, tag):
    return [json.load(open(os.path.join(folder, f"devices-{tag}-rank{r}.json"))) for r in range(2)]


class EpochsTrained(keras.callbacks.Callback):
    """Rank 0 appends ``<tag> <epoch>`` to ``path`` at each epoch's start."""

    def __init__(self, path, tag):
        super().__init__()
        self.path, self.tag = path, tag

    def on_epoch_begin(self, epoch, logs=None):
        import horovod.tensorflow as hvd_tf

        if hvd_tf.rank() == 0:
            with open(self.path, "a") as f:
                f.write(f"{self.tag} {epoch}\n")


def objects(prefix=""):
    """Every key in the bucket under ``prefix``."""
    found, pages = [], boto3.client("s3").get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=BUCKET, Prefix=prefix):
        found += [o["Key"] for o in page.get("Contents", [])]
    return sorted(found)


def checkpoints(run_id):
    """The checkpoint folders of ``run_id`` in the bucket."""
    prefix = f"store/runs/{run_id}/checkpoints/"
    return sorted({key[len(prefix):].split("/", 1)[0] for key in objects(prefix)})


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(3, activation="softmax")])


def max_diff(weights, others):
    return float(max(np.abs(a - b).max() for a, b in zip(weights, others)))


def stored_model(store, key):
    """The weights of the ``.keras`` model at ``key`` in the bucket."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        store.fs.get_file(f"{BUCKET}/{key}", path)
        return keras.models.load_model(path, compile=False).get_weights()


def trained_weights(store, key):
    """The model's weights in the trainer's checkpoint folder at ``key`` in the bucket."""
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as folder:
        for path in store.fs.find(f"{BUCKET}/{key}"):
            store.fs.get_file(path, os.path.join(folder, path.rsplit("/", 1)[-1]))
        model = make_model()
        tf.train.Checkpoint(model=model).read(os.path.join(folder, "ckpt")).expect_partial()
        return model.get_weights()


def fits(session, work, driver_addr):
    """The quiet, retried and resumed fits with the store in the bucket, and what the resumed model does."""
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    rank_dirs_before = set(glob.glob(os.path.join(os.environ["TMPDIR"], "hvdkeras-run-*")))
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, ROWS)
    features = rng.normal(size=(ROWS, 16)) + labels[:, None]
    df = session.createDataFrame([(Vectors.dense(features[i].tolist()), int(labels[i]), i) for i in range(ROWS)],
                                 ["features", "label", "id"])
    store = Store.create(f"s3://{BUCKET}/store")
    trained = os.path.join(work, "epochs-trained")

    def fit(run_id, tag, use_gpu=True, max_retries=0, kills=(), **kw):
        return hvd_keras.KerasEstimator(
            num_proc=2, store=store, model=make_model(), optimizer=keras.optimizers.SGD(0.1),
            loss="sparse_categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"],
            label_cols=["label"], batch_size=16, epochs=3, random_seed=1, verbose=0, run_id=run_id,
            use_gpu=use_gpu, max_retries=max_retries,
            callbacks=[RecordRank(work, tag, driver_addr, HIDDEN), EpochsTrained(trained, tag), *kills], **kw).fit(df)

    def best():  # the highest training loss: the first epoch's model, whatever the later epochs do
        return BestModelCheckpoint(monitor="loss", mode="max")

    def marker(name):
        return os.path.join(work, name)

    laps, clock = {}, [time.time()]

    def lap(name):  # the seconds since the last lap, as report["fit_laps"][name]
        laps[name], clock[0] = round(time.time() - clock[0], 1), time.time()

    quiet = fit("quiet", "quiet", keep_intermediate_data=True)
    lap("quiet")
    report = {"devices": {"use_gpu": devices(work, "quiet")}}
    report["ranks"] = [d["where"] for d in report["devices"]["use_gpu"]]
    report["pythons"] = [d["python"] for d in report["devices"]["use_gpu"]]
    # The same fit again, from the start: in epoch 2 the executor JVM under rank 1 is SIGKILLed (Spark replaces
    # it, and starts the ranks again from epoch 1's checkpoint), in epoch 3 rank 1 itself, past max_retries=1: the
    # fit ends in one line naming its run_id.
    began = time.time()
    try:
        fit("retried", "retried", use_gpu=False, max_retries=1,
            kills=[KillRankOnce(marker("executor-once"), epoch=1, executor=True),
                   KillRankOnce(marker("rank-once"), epoch=2)],
            checkpoint_callback=best())
        error = None
    except HvdkerasError as exc:
        error = str(exc)
    report["retried"] = {"error": error, "checkpoints": checkpoints("retried"), "seconds": time.time() - began,
                         "killed": [os.path.exists(marker(m)) for m in ("executor-once", "rank-once")]}
    report["devices"]["no_gpu"] = devices(work, "retried")
    best_in_bucket = stored_model(store, "store/runs/retried/checkpoint_callback/model.keras")
    lap("retried")
    model = fit("retried", "resumed", use_gpu=False, checkpoint_callback=best())
    lap("resumed")
    final = trained_weights(store, "store/runs/retried/checkpoints/epoch-0003")
    report["resumed"] = {"epochs": len(model.getHistory()["loss"]), "checkpoints": checkpoints("retried"),
                         "run_files": sorted(k.rsplit("/", 1)[-1] for k in objects("store/runs/retried/")
                                             if "/checkpoints/" not in k),
                         "max_diff_from_quiet": max_diff(final, quiet.getModel().get_weights()),
                         "returned_vs_best_in_bucket": max_diff(model.getModel().get_weights(), best_in_bucket),
                         "best_vs_quiet": max_diff(best_in_bucket, quiet.getModel().get_weights())}
    with open(trained) as f:
        report["epochs_trained"] = [line.split() for line in f.read().splitlines()]

    model.setOutputCols(["label_prob"])
    predicted = model.transform(df)
    report["transform"] = {"columns": predicted.columns, "rows": predicted.count()}
    few = df.filter("id < 5").coalesce(1)
    first = [r.label_prob.toArray().tolist() for r in model.transform(few).orderBy("id").collect()]
    path = f"s3://{BUCKET}/models/resumed"
    model.save(path)
    loaded = hvd_keras.KerasModel.load(path)
    again = [r.label_prob.toArray().tolist() for r in loaded.transform(few).orderBy("id").collect()]
    report["persist"] = {"same": first == again, "objects": objects("models/resumed/"),
                         "output_cols": loaded.getOutputCols()}

    lap("transform_persist")
    intermediate = sorted({k.split("/")[1] for k in objects("store/intermediate_")})
    (kept,) = [n for n in intermediate if n.startswith("intermediate_train_data.quiet.")]
    report["left"] = [n for n in intermediate if ".quiet." not in n]  # the retried fits removed their Parquet
    report["same_files"] = prepared_twice_alike(df, store, f"{store.prefix_path}/{kept}", ["features"], ["label"],
                                                seed=1)
    lap("prepared_twice")
    s3 = boto3.client("s3")
    holding = [key for key in objects() if SECRET.encode() in s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()]
    left = set(glob.glob(os.path.join(os.environ["TMPDIR"], "hvdkeras-run-*"))) - rank_dirs_before
    report["secret"] = {"objects_checked": len(objects()), "holding_secret": holding, "rank_dirs_left": len(left)}
    lap("secret")
    report["fit_laps"] = laps
    report["fit_seconds"] = {"quiet": quiet.getFitSeconds(), "resumed": model.getFitSeconds()}
    return report


def part(report, lap_name, module_name, run):
    """``run(module)``'s entries into ``report``, the module (a script of this folder, which the executors cannot
    import) pickled by value, its seconds as ``lap_name``."""
    module = importlib.import_module(module_name)
    cloudpickle.register_pickle_by_value(module)
    began = time.time()
    report.update(run(module))
    report["seconds"][lap_name] = time.time() - began


def estimator_fit(module, session, work):
    """``spark_estimator_check``'s two-output fit against one process, and its transform."""
    fit, fitted, frame = module.fit_check(session, work)
    return {"estimator_fit": fit, "estimator_transform": module.transform_check(fitted, frame)}


def slots(sc):
    return {"default_parallelism": sc.defaultParallelism, "registered": _registered_slots(sc)}


session = start_session()
sc = session.sparkContext
try:
    report = {"master": sc.master, "slots": {"at_start": slots(sc)}, "seconds": {"session": time.time() - began},
              "driver_netns": os.readlink("/proc/self/ns/net")}
    lap = time.time()
    report.update(fits(session, OPTIONS.work, driver_addr))
    report["seconds"]["fits"] = time.time() - lap
    report["slots"]["after_run"] = slots(sc)
    before = time.time()
    try:
        hvd_spark.run(where, args=(driver_addr,), num_proc=3, verbose=0)
        error = None
    except HvdkerasError as exc:
        error = str(exc)
    report["too_many"] = {"error": error, "seconds": time.time() - before}
    if OPTIONS.estimator_fit:
        part(report, "estimator_fit", "spark_estimator_check",
             lambda m: estimator_fit(m, session, os.path.join(OPTIONS.work, "estimator")))
    if OPTIONS.tuning:
        part(report, "tuning", "spark_tuning_check",
             lambda m: {"tuning": m.run_tuning_checks(session, os.path.join(OPTIONS.work, "tuning"))})
    if OPTIONS.stream:
        part(report, "stream", "spark_stream_check",
             lambda m: {"stream": m.run_stream_checks(session, os.path.join(OPTIONS.work, "stream"))})
    if OPTIONS.scenarios:
        part(report, "scenarios", "horovod_spark_keras_check",
             lambda m: {"horovod": m.run_scenarios(session, os.path.join(OPTIONS.work, "horovod"),
                                                   OPTIONS.scenarios.split(","))})
    print("RESULT " + json.dumps(report), flush=True)
finally:
    session.stop()
processes.exit_now(0)  # without the interpreter's teardown: most of a second with TensorFlow imported
