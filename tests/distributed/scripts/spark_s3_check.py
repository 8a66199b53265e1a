"""hvdkeras.spark.keras.KerasEstimator with its store on S3: moto's S3 server on loopback, local[2], one driver.

:func:`run_s3_checks`, which ``spark_local_check.py --s3 ENDPOINT`` (the driver test_spark_s3.py shares; its fixture
starts the server and stops it) runs on local[2]. The driver and the executors find the server through the
environment only, as a user's job finds S3 (``AWS_ENDPOINT_URL``, dummy credentials, :func:`s3_environment`), and
``Store.create("s3://bucket/store")``:

* ``killed``: a fit whose callback SIGKILLs rank 1 at the third batch of epoch 2, once (a marker file in
  WORK remembers); it must end in one line, with epoch 1's checkpoint published in the bucket;
* ``resumed``: a second fit with the same run_id resumes from the bucket: the epochs it trained (rank 0's
  callback writes them to WORK), the bucket's checkpoints and run files after it (that a resume ends on an
  undisturbed fit's weights, bit for bit, is test_spark_cluster.py's, through the same checkpoint mirror);
* ``transform``: the resumed model's prediction column on every row;
* ``persist``: ``KerasModel.save("s3://bucket/models/...")`` and ``KerasModel.load`` predict the same;
* ``secret``: the objects in the bucket holding the secret key (none may), the ranks' local folders left.
"""
import glob
import os
import signal
import tempfile
import time

import boto3
import numpy as np
from pyspark.ml.linalg import Vectors

import hvdkeras.spark.keras as hvd_keras
from hvdkeras.common.errors import HvdkerasError
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.store import Store

SECRET = "hvdkeras-test-secret-key-not-in-any-file"
BUCKET = "bucket"


def s3_environment(endpoint, work):
    """What the driver sets before Spark starts, so that the executors' Python workers and the Horovod ranks
    inherit it: the S3 server and its credentials (as a user's job finds S3), and the ranks' local folders in
    ``work``'s own temporary folder, where no other job's ranks are."""
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="hvdkeras-test", AWS_SECRET_ACCESS_KEY=SECRET,
                      AWS_DEFAULT_REGION="us-east-1", TMPDIR=tmp)
    tempfile.tempdir = tmp


ROWS = 192


class KillRankOnce(keras.callbacks.Callback):
    """SIGKILLs rank 1's process at the third batch of the second epoch, once (``marker`` remembers)."""

    def __init__(self, marker):
        super().__init__()
        self.marker, self.epoch = marker, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        import horovod.tensorflow as hvd_tf

        if self.epoch == 1 and batch == 2 and hvd_tf.rank() == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


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


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(3, activation="softmax")])


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


def run_s3_checks(session, work):
    """Every check with the store in the bucket, on ``session``'s Spark (after :func:`s3_environment`): the result
    ``spark_local_check.py`` reports."""
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    began, out = time.monotonic(), {"seconds": {}}
    tmp = os.environ["TMPDIR"]
    rank_dirs_before = set(glob.glob(os.path.join(tmp, "hvdkeras-run-*")))

    def lap(name):
        out["seconds"][name] = round(time.monotonic() - began, 1)

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, ROWS)
    features = rng.normal(size=(ROWS, 16)) + labels[:, None]
    df = session.createDataFrame([(Vectors.dense(features[i].tolist()), int(labels[i]), i) for i in range(ROWS)],
                                 ["features", "label", "id"])
    store = Store.create(f"s3://{BUCKET}/store")
    marker, trained = os.path.join(work, "killed-once"), os.path.join(work, "epochs-trained")
    lap("data")

    def fit(run_id, tag, kill=True, **kw):
        callbacks = [EpochsTrained(trained, tag)] + ([KillRankOnce(marker)] if kill else [])
        return hvd_keras.KerasEstimator(
            num_proc=2, store=store, model=make_model(), optimizer=keras.optimizers.SGD(0.1),
            loss="sparse_categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"],
            label_cols=["label"], batch_size=16, epochs=3, random_seed=1, verbose=0, run_id=run_id,
            callbacks=callbacks, **kw).fit(df)

    try:
        fit("killed", "first", max_retries=0)  # the fit itself would start the ranks again: here the user does
        error = None
    except HvdkerasError as exc:
        error = str(exc)
    out["killed"] = {"error": error, "checkpoints": checkpoints("killed")}
    lap("killed")
    resumed = fit("killed", "second")
    out["resumed"] = {"history_epochs": len(resumed.getHistory()["loss"]), "checkpoints": checkpoints("killed"),
                      "run_files": [k.rsplit("/", 1)[-1] for k in objects("store/runs/killed/")
                                    if "/checkpoints/" not in k]}
    with open(trained) as f:
        out["epochs_trained"] = [line.split() for line in f.read().splitlines()]
    lap("resumed")

    model = resumed.setOutputCols(["label_prob"])
    predicted = model.transform(df)
    out["transform"] = {"columns": predicted.columns, "rows": predicted.count()}
    few = df.filter("id < 5").coalesce(1)
    first = [r.label_prob.toArray().tolist() for r in model.transform(few).orderBy("id").collect()]
    path = f"s3://{BUCKET}/models/resumed"
    model.save(path)
    loaded = hvd_keras.KerasModel.load(path)
    again = [r.label_prob.toArray().tolist() for r in loaded.transform(few).orderBy("id").collect()]
    out["persist"] = {"same": first == again, "objects": objects("models/resumed/"),
                      "output_cols": loaded.getOutputCols()}
    lap("transform_persist")

    s3 = boto3.client("s3")
    holding = [key for key in objects() if SECRET.encode() in s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()]
    left = set(glob.glob(os.path.join(tmp, "hvdkeras-run-*"))) - rank_dirs_before
    out["secret"] = {"objects_checked": len(objects()), "holding_secret": holding, "rank_dirs_left": len(left)}
    return out

