"""hvdkeras.spark.keras.remote: what rank 0 returns when Horovod's ``checkpoint_callback`` saved the best model."""
import os

import numpy as np
import pytest

pytest.importorskip("pyspark")

from hvdkeras.callbacks.model_checkpoint import BestModelCheckpoint  # noqa: E402
from hvdkeras.runtime.compat import keras  # noqa: E402
from hvdkeras.spark.keras import remote  # noqa: E402


def test_the_best_saved_model_loads_with_the_estimators_custom_objects(tmp_path):
    # Horovod's Rossmann example: the output's activation is a function of the script, which Keras saves by name
    # only; the estimator's custom_objects name it (a function defined here, as in a script, imports from nowhere).
    def act_scaled(x):
        return keras.activations.sigmoid(x) * 3.0

    def model():
        return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, activation=act_scaled)])

    best, trained = model(), model()
    best.set_weights([np.full((2, 1), 0.5, "float32"), np.full((1,), 0.25, "float32")])
    callback = BestModelCheckpoint(monitor="val_loss")
    path = remote._place_checkpoint_callback(callback, str(tmp_path))
    os.makedirs(os.path.dirname(path))  # the checkpoint callback's folder, which the rank's trainer makes
    best.save(path)

    remote._load_saved(trained, path, callback, {"act_scaled": act_scaled})

    for got, want in zip(trained.get_weights(), best.get_weights()):
        np.testing.assert_array_equal(got, want)


def follow(mirror, callback, local):
    """Rank 0's start: the callback placed in its local folder once, then followed."""
    return remote.follow_checkpoint_callback(mirror, callback, remote._place_checkpoint_callback(callback, local),
                                             local)


def test_a_resumed_start_gets_the_best_model_and_the_score_a_later_epoch_must_beat(tmp_path):
    # Spark retries the gang, or the user fits again with the same run_id: rank 0 starts in a new local folder,
    # with a new BestModelCheckpoint (unpickled again), and must not forget the best of the epochs before.
    from hvdkeras.spark.common.publish import RunMirror
    from hvdkeras.spark.common.store import Store

    store = Store.create(str(tmp_path / "store"))
    run = store.get_localized_path(store.get_run_path("r"))
    first, first_local = BestModelCheckpoint(monitor="val_loss"), str(tmp_path / "first")
    mirror = RunMirror(store.fs, run, first_local, keep=2)
    assert not follow(mirror, first, first_local)  # a new run: nothing to fetch
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    os.makedirs(os.path.dirname(first.filepath))
    model.save(first.filepath)
    first.best = 0.125  # as the callback sets it when it saves
    mirror.publish()

    again, again_local = BestModelCheckpoint(monitor="val_loss"), str(tmp_path / "again")
    assert again.best == np.inf
    assert follow(RunMirror(store.fs, run, again_local, keep=2), again, again_local)
    assert again.best == 0.125 and again.filepath.startswith(again_local)
    restored = keras.models.load_model(again.filepath, compile=False)
    for got, want in zip(restored.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)

    yours = BestModelCheckpoint(monitor="val_loss", filepath=str(tmp_path / "mine.keras"))
    assert not follow(RunMirror(store.fs, run, again_local, keep=2), yours, again_local)
    assert yours.best == np.inf  # a path of yours: saved there only, never fetched into


@pytest.mark.parametrize("trained", [ZeroDivisionError("a bug in training"), None])
def test_a_failed_publish_is_the_ranks_error_only_after_a_training_that_returned(tmp_path, monkeypatch, trained):
    import dataclasses

    from hvdkeras.common.errors import SetupError
    from hvdkeras.spark.common.store import Store

    class Mirror:
        def __init__(self, *args, **kwargs):
            self.shown, self.local = "s3://bucket/runs/r", str(tmp_path / "local")

        def fetch(self):
            pass

        def publish(self):
            raise OSError("the bucket is gone")

    def train_(config_tree, spec, local, best):
        if trained is not None:
            raise trained
        return {"history": {}}

    monkeypatch.setattr(remote, "RunMirror", Mirror)
    monkeypatch.setattr(remote, "follow_checkpoint_callback", lambda *args: False)
    monkeypatch.setattr(remote, "_train", train_)
    monkeypatch.setattr(remote, "local_folder", lambda: str(tmp_path / "local"))
    @dataclasses.dataclass(frozen=True)
    class Spec:  # the parts of SparkTaskSpec rank 0's train reads before training
        store: object
        checkpoint_callback: object = None
        last_callbacks: tuple = ()

    spec = Spec(Store.create(str(tmp_path / "store")))
    expected = (ZeroDivisionError, "a bug in training") if trained else (SetupError, "cannot publish the run's")
    with pytest.raises(expected[0], match=expected[1]):
        remote.train({"checkpoint": {"keep": 2}}, spec, str(tmp_path / "store" / "runs" / "r"))
