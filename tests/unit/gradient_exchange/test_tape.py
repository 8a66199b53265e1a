"""hvdkeras.gradient_exchange.tape in one process: Horovod's tape on Keras 2 and 3 variables, averaging once."""
import pytest
import tensorflow as tf

from hvdkeras import gradient_exchange
from hvdkeras.gradient_exchange import allreduce, averaged
from hvdkeras.gradient_exchange.tape import DistributedGradientTape, PartialDistributedGradientTape
from hvdkeras.runtime import compat

keras = compat.keras


def _model():
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])


def _loss(model):
    return tf.reduce_sum(model(tf.ones((5, 4))) ** 2)


def _requests(monkeypatch):
    sent = []
    monkeypatch.setattr(allreduce.hvd, "allreduce", lambda t, name, **kw: sent.append(name) or t)
    return sent


@pytest.mark.parametrize("eager", [True, False])
def test_the_tape_gives_the_plain_gradients_on_one_rank_with_one_request_each(hvd_single, monkeypatch, eager):
    sent = _requests(monkeypatch)
    model = _model()

    def gradients(distributed):
        with tf.GradientTape() as tape:
            loss = _loss(model)
        if distributed:
            tape = DistributedGradientTape(tape)
        return tape.gradient(loss, model.trainable_variables)

    plain = gradients(False)
    dist = gradients(True) if eager else tf.function(lambda: gradients(True))()
    assert len(sent) == len(model.trainable_variables)
    for a, b in zip(plain, dist):
        assert float(tf.reduce_max(tf.abs(a - b))) == 0.0


def test_a_distributed_optimizer_does_not_average_what_the_tape_averaged(hvd_single, monkeypatch):
    model = _model()
    optimizer = gradient_exchange.DistributedOptimizer(keras.optimizers.SGD(0.1))
    compat.build_optimizer(optimizer, model.trainable_variables)  # so the step is traced once
    if not compat.KERAS_3:  # Horovod's own exchange on Keras 2: count its calls
        calls = []
        horovod_allreduce = optimizer._allreduce
        optimizer._allreduce = lambda g, v: calls.append(len(g)) or horovod_allreduce(g, v)
    sent = _requests(monkeypatch)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = _loss(model)
        tape = DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    step()
    assert sent == [f"DistributedGradientTape.grad.{i}" for i in reversed(range(len(model.trainable_variables)))]
    if not compat.KERAS_3:
        assert calls == []
    assert averaged.averaged_keys(model.trainable_variables, [tf.ones(1)] * 4) == set()  # cleared after applying


def test_local_sources_are_not_sent(hvd_single, monkeypatch):
    sent = _requests(monkeypatch)
    model = _model()
    with tf.GradientTape() as tape:
        loss = _loss(model)
    tape = PartialDistributedGradientTape(tape, local_layers=model.layers[-1])
    local, shared = tape.get_local_and_global_gradients(loss, model.trainable_variables)
    assert len(local) == len(shared) == 2
    assert len(sent) == 2


def test_a_single_source_and_nested_sources_keep_their_structure(hvd_single):
    model = _model()
    with tf.GradientTape(persistent=True) as tape:
        loss = _loss(model)
    tape = DistributedGradientTape(tape)
    kernel = model.trainable_variables[0]
    assert tape.gradient(loss, kernel).shape == tuple(kernel.shape)
    nested = tape.gradient(loss, {"first": model.trainable_variables[:2], "last": model.trainable_variables[2]})
    assert sorted(nested) == ["first", "last"] and len(nested["first"]) == 2


def test_the_tape_keeps_the_class_of_the_tape_it_wraps(hvd_single):
    with tf.GradientTape() as tape:
        pass
    assert isinstance(DistributedGradientTape(tape), tf.GradientTape)
