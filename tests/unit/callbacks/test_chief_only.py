"""Chief-only logging callbacks (TensorBoard, CSVLogger, ProgbarLogger): rank 0 writes, the others run along."""
import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import callbacks as hc
from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras
from tests.unit.helpers import model_and_data, tensorboard_scalars


def test_chief_only_loggers_write_on_rank_0(hvd_single, tmp_path, monkeypatch):
    model, x, y = model_and_data()
    model.fit(x, y, epochs=2, batch_size=8, verbose=0,
              callbacks=[hc.CSVLogger(str(tmp_path / "log.csv")), hc.TensorBoard(str(tmp_path / "tb"))])
    assert (tmp_path / "log.csv").read_text().count("\n") == 3
    assert (tmp_path / "tb").is_dir()
    assert isinstance(hc.ProgbarLogger(), keras.callbacks.ProgbarLogger)  # so Keras adds no bar of its own

    monkeypatch.setattr(distributed, "is_chief", lambda: False)  # any other rank: runs along, writes nothing
    other = [hc.CSVLogger(str(tmp_path / "other.csv")), hc.TensorBoard(str(tmp_path / "other_tb")), hc.ProgbarLogger()]
    model.fit(x, y, epochs=1, batch_size=8, verbose=1, callbacks=other)
    assert not (tmp_path / "other.csv").exists() and not (tmp_path / "other_tb").exists()
    assert all(cb.model is model for cb in other)


@pytest.mark.parametrize("size", [1, 2])
def test_rank_local_evaluation_scalars_only_on_one_rank(hvd_single, tmp_path, monkeypatch, size):
    """Keras writes evaluation_<metric>_vs_iterations from the un-averaged validation logs: kept on one rank only."""
    monkeypatch.setattr(distributed, "size", lambda: size)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, activation="softmax", input_shape=(3,))])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = np.random.RandomState(0).rand(16, 3).astype("float32"), np.arange(16) % 2
    model.fit(x, y, epochs=2, batch_size=8, verbose=0, validation_data=(x, y),
              callbacks=[hc.TensorBoard(str(tmp_path / "tb"))])
    val = tensorboard_scalars(str(tmp_path / "tb" / "validation"))
    assert {"epoch_loss", "epoch_accuracy"} <= set(val)
    assert ("evaluation_loss_vs_iterations" in val) == (size == 1)


def test_tensorboard_without_the_package_is_one_line_saying_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(compat, "TENSORBOARD_INSTALLED", False)
    with pytest.raises(ImportError) as err:
        hc.TensorBoard(log_dir=str(tmp_path))
    assert str(err.value).endswith("does not install: pip install tensorboard") and "\n" not in str(err.value)
