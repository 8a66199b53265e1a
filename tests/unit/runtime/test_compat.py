"""hvdkeras.runtime.compat: what differs between Keras 2 and Keras 3, behind one call each."""
import types

import pytest

from hvdkeras.runtime import compat
from hvdkeras.runtime.compat import keras
from tests.unit.helpers import small_bn_model, xy


def test_count_steps_sees_each_step_of_a_fit_before_any_callback_and_a_later_fit_wraps_keras_own_function():
    seen = []

    class Counting(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            assert compat.count_steps(self.model, lambda: seen.append("step"))

        def on_train_batch_end(self, batch, logs=None):
            seen.append(f"end {batch}")

        def on_train_end(self, logs=None):
            compat.uncount_steps(self.model)

    class Leaves(keras.callbacks.Callback):  # a fit that ends in an exception never reaches on_train_end
        def on_train_batch_end(self, batch, logs=None):
            raise KeyboardInterrupt

    model = small_bn_model()
    x, y = xy(12, 0)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[Counting()])
    assert seen == ["step", "end 0", "step", "end 1", "step", "end 2"]
    assert not hasattr(model.train_function, "_hvdkeras_counted")  # Keras' own again
    seen.clear()
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[Counting(), Leaves()])
    assert seen == ["step", "end 0"] and hasattr(model.train_function, "_hvdkeras_counted")  # left wrapped
    seen.clear()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[Counting()])
    assert seen == ["step", "end 0", "step", "end 1", "step", "end 2"]  # once per step, not once per wrapper


def test_count_steps_leaves_a_step_that_raised_uncounted_and_a_model_without_a_train_function_alone():
    counted = []

    def fails(iterator):
        raise RuntimeError("an allreduce failed")

    model = types.SimpleNamespace(train_function=fails)
    assert compat.count_steps(model, lambda: counted.append(1))
    with pytest.raises(RuntimeError, match="allreduce failed"):
        model.train_function(iter([]))
    assert counted == []
    compat.uncount_steps(model)
    assert model.train_function is fails
    assert not compat.count_steps(types.SimpleNamespace(train_function=None), lambda: counted.append(1))
