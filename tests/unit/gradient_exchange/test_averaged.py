"""hvdkeras.gradient_exchange.averaged: what counts as averaged in this step, eagerly and in a traced step."""
import pytest
import tensorflow as tf

from hvdkeras.gradient_exchange import averaged
from hvdkeras.runtime import compat


def _variables():
    return [compat.keras.Variable(tf.zeros(2)) if compat.KERAS_3 else tf.Variable(tf.zeros(2)),
            tf.Variable(tf.zeros(3))]


def test_eagerly_a_gradient_counts_only_while_it_is_the_tensor_that_was_averaged():
    variables = _variables()
    grads = [tf.ones(2), tf.ones(3)]
    averaged.record(variables, grads)
    keys = [compat.variable_key(v) for v in variables]
    assert averaged.averaged_keys(variables, grads) == set(keys)
    clipped = [g * 0.5 for g in grads]  # a new tensor after averaging: not the averaged one
    assert averaged.averaged_keys(variables, clipped) == set()
    averaged.clear(variables)
    assert averaged.averaged_keys(variables, grads) == set()


def test_a_cond_branch_sees_the_record_of_its_traced_step():
    variables = _variables()
    found = {}

    @tf.function
    def step(flag):
        grads = [tf.ones(2), tf.ones(3)]
        averaged.record(variables, grads)

        def branch():
            found["keys"] = averaged.averaged_keys(variables, grads)
            found["inside_cond"] = averaged.inside_cond()
            return tf.constant(1)

        found["outside"] = averaged.inside_cond()
        return tf.cond(flag, branch, lambda: tf.constant(0))

    step(tf.constant(True))
    assert found["keys"] == {compat.variable_key(v) for v in variables}
    assert found["inside_cond"] and not found["outside"]


def test_a_function_called_inside_a_cond_branch_is_not_itself_inside_one():
    """Keras 3 runs its step (a tf.function) in a cond branch of its steps_per_execution loop, on every rank."""
    seen = {}

    @tf.function
    def inner():
        seen["inside_cond"] = averaged.inside_cond()
        return tf.constant(1)

    @tf.function
    def outer(flag):
        return tf.cond(flag, inner, lambda: tf.constant(0))

    outer(tf.constant(True))
    assert seen["inside_cond"] is False


def test_refuse_inside_cond_names_the_fix():
    @tf.function
    def step(flag):
        def branch():
            averaged.refuse_inside_cond()
            return tf.constant(1)

        return tf.cond(flag, branch, lambda: tf.constant(0))

    with pytest.raises(RuntimeError, match="inside a tf.cond branch.*Average before branching"):
        step(tf.constant(True))


@pytest.mark.skipif(not compat.KERAS_3, reason="Keras 2's LossScaleOptimizer averages before its overflow check")
def test_a_keras3_loss_scale_optimizer_around_a_distributed_one_stops_the_first_step_in_one_line(hvd_single):
    """Keras 3's LossScaleOptimizer applies its inner optimizer in a tf.cond on its own rank's overflow."""
    from hvdkeras import gradient_exchange

    keras = compat.keras
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(
        gradient_exchange.DistributedOptimizer(keras.optimizers.SGD(0.1))), loss="mse")
    with pytest.raises(RuntimeError, match="inside a tf.cond branch.*LossScaleOptimizer"):
        model.fit(tf.ones((4, 3)), tf.ones((4, 1)), epochs=1, verbose=0)
