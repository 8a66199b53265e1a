"""TerminateOnNaN, EarlyStopping and ReduceLROnPlateau in one process: Keras' behaviour, agreed over one rank."""
import numpy as np

from hvdkeras import callbacks as hc
from hvdkeras.runtime.compat import keras
from tests.unit.helpers import model_and_data


def test_terminate_on_nan_single_rank(hvd_single):
    model, x, y = model_and_data()
    x[16:24] = np.nan
    seen = []

    class Batches(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(batch)

    model.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0, callbacks=[hc.TerminateOnNaN(), Batches()])
    assert seen == [0, 1, 2]
