"""hvdkeras.checkpointing: atomic per-epoch checkpoint folders, found, restored and cleaned up."""
import os

import numpy as np
import pytest

from hvdkeras import checkpointing
from hvdkeras.compat import keras
from hvdkeras.errors import CheckpointError
from tests.unit.helpers import small_bn_model, xy


def test_crash_mid_write_leaves_previous_checkpoint_as_latest(hvd_single, tmp_path):
    model = small_bn_model()
    store = checkpointing.CheckpointStore(str(tmp_path), keep=3)
    trackable = checkpointing.trackable_for(model)
    store.save(1, trackable, {})

    class Exploding:
        def write(self, prefix):
            trackable.write(prefix)  # the data lands, then the process dies before meta.json
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        store.save(2, Exploding(), {})
    assert store.latest().epoch == 1
    assert sorted(os.listdir(tmp_path)) == ["epoch-0001"]

    # a temp directory left by a hard kill is ignored, then cleaned
    os.makedirs(tmp_path / ".epoch-0002.tmp-abc")
    (tmp_path / ".epoch-0002.tmp-abc" / "ckpt.index").write_text("partial")
    os.makedirs(tmp_path / "epoch-0003")  # no meta.json: incomplete
    assert store.latest().epoch == 1
    store.remove_stale()
    assert not (tmp_path / ".epoch-0002.tmp-abc").exists()


def test_restore_round_trip_and_mismatch_error(hvd_single, tmp_path):
    model = small_bn_model(seed=1)
    model.fit(*xy(16, 0), epochs=1, verbose=0)
    store = checkpointing.CheckpointStore(str(tmp_path))
    info = store.save(3, checkpointing.trackable_for(model), {})

    other = small_bn_model(seed=2)
    other.optimizer.build(other.trainable_variables)
    store.restore(info, checkpointing.trackable_for(other))
    for a, b in zip(model.variables + model.optimizer.variables, other.variables + other.optimizer.variables):
        assert np.array_equal(a.numpy(), b.numpy())

    wrong = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5)])
    wrong.compile(keras.optimizers.SGD(0.1), "mse")
    wrong.optimizer.build(wrong.trainable_variables)
    with pytest.raises(CheckpointError, match="does not fit this model"):
        store.restore(info, checkpointing.trackable_for(wrong))
