"""ProfileBatches: a profiler trace of the batches asked for, on rank 0; hooks called directly, then in a fit."""
import glob
import os

import numpy as np
import pytest

from hvdkeras import config as config_lib
from hvdkeras.callbacks import ProfileBatches
from hvdkeras.runtime import compat
from tests.unit.helpers import config_file

keras = compat.keras


def _traces(log_dir):
    return glob.glob(os.path.join(str(log_dir), "plugins", "profile", "*", "*.xplane.pb"))


@pytest.mark.parametrize("batches", [(0, 2), (3, 2), (1,), (1, 2, 3), (1.5, 2)])
def test_batches_must_be_start_and_stop_from_one(tmp_path, batches):
    with pytest.raises(ValueError) as err:
        ProfileBatches(str(tmp_path), batches)
    assert str(err.value) == f"batches must be (start, stop) with 1 <= start <= stop; Received: batches={batches!r}"


def test_it_traces_from_start_to_stop_across_epochs(hvd_single, tmp_path):
    cb = ProfileBatches(str(tmp_path), (3, 4))
    cb.on_train_begin()
    for batch in range(2):  # batches 1 and 2 of the run: nothing yet
        cb.on_train_batch_begin(batch)
        cb.on_train_batch_end(batch)
    assert not cb._tracing and not _traces(tmp_path)
    cb.on_train_batch_begin(0)  # batch 3, the first of the next epoch: tracing
    assert cb._tracing
    cb.on_train_batch_end(0)
    cb.on_train_batch_begin(1)  # batch 4: the last
    cb.on_train_batch_end(1)
    assert not cb._tracing and len(_traces(tmp_path)) == 1
    assert not cb._implements_train_batch_hooks()  # done: no cost on the batches after


def test_a_fit_shorter_than_stop_writes_what_it_ran(hvd_single, tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(np.ones((8, 3)), np.ones(8), batch_size=4, epochs=1, verbose=0,
              callbacks=[ProfileBatches(str(tmp_path), (2, 100))])
    assert len(_traces(tmp_path)) == 1


def test_the_config_asks_for_it(hvd_single, tmp_path, restore_environment):
    from hvdkeras.training.trainer import Trainer

    cfg = config_lib.load(config_file("digits.yaml"), ["trainer.epochs=1", "trainer.steps_per_epoch=4",
                                                       "trainer.verbose=0", "runtime.profile_batches=[2, 3]",
                                                       "trainer.export=false"])
    Trainer.from_config(cfg, str(tmp_path / "run")).fit()
    assert len(_traces(tmp_path / "run" / "tensorboard")) == 1
    with pytest.raises(config_lib.ConfigError) as err:
        config_lib.load(None, ["runtime.profile_batches=[3, 2]"])
    assert str(err.value) == ("runtime.profile_batches in --set runtime.profile_batches=[3, 2] must be [] (no profile)"
                              " or [start, stop] with 1 <= start <= stop; received: [3, 2]")
