"""ModelCheckpoint in one process: best-only choice, keep, file name formatting and refused arguments."""
import os

import pytest

from hvdkeras import callbacks as hc
from hvdkeras.runtime import compat
from tests.unit.helpers import model_and_data


def test_model_checkpoint_best_only_keep_and_format_errors(hvd_single, tmp_path):
    model, _, _ = model_and_data()
    cb = hc.ModelCheckpoint(str(tmp_path / "w-{epoch:02d}-{val_loss:.2f}.weights.h5"), save_best_only=True,
                            save_weights_only=True, keep=2)
    cb.set_model(model)
    for epoch, val_loss in enumerate([0.9, 0.8, 0.85, 0.5, 0.4]):
        cb.on_epoch_end(epoch, {"val_loss": val_loss})
    assert sorted(os.listdir(tmp_path)) == ["w-04-0.50.weights.h5", "w-05-0.40.weights.h5"]
    assert cb.best == 0.4

    acc = hc.ModelCheckpoint(str(tmp_path / "acc.weights.h5"), monitor="val_accuracy", save_best_only=True,
                             save_weights_only=True)
    acc.set_model(model)
    acc.on_epoch_end(0, {"val_accuracy": 0.5})
    acc.on_epoch_end(1, {"val_accuracy": 0.4})  # mode auto: accuracy is maximised
    assert acc.best == 0.5

    bad = hc.ModelCheckpoint(str(tmp_path / "m-{val_los}.weights.h5"), save_weights_only=True)
    bad.set_model(model)
    with pytest.raises(KeyError, match=r'Failed to format this callback filepath: ".*m-\{val_los\}\.weights\.h5"'):
        bad.on_epoch_end(0, {"val_loss": 1.0})
    with pytest.raises(ValueError, match="Received: mode='best'"):
        hc.ModelCheckpoint("x.h5", mode="best")
    if compat.KERAS_3:  # a name Keras 3 cannot save weights to fails before training, not at the first save
        with pytest.raises(ValueError, match=r"must end in `\.weights\.h5`"):
            hc.ModelCheckpoint("x.h5", save_weights_only=True)
