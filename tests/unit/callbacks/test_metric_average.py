"""MetricAverageCallback and global_results in one process: exact global metrics from summed metric states."""
import numpy as np
import pytest

from hvdkeras.callbacks import MetricAverageCallback
from hvdkeras.callbacks.metric_average import global_results
from hvdkeras.runtime import distributed
from tests.unit.helpers import attach, small_bn_model, xy


def metric_states(model):
    return [v.numpy().copy() for m in model.metrics for v in m.variables]


def test_results_from_summed_states_are_exact_over_uneven_parts(hvd_single, monkeypatch):
    """Two 'ranks' with 7 and 30 examples: summing states gives the metric on all 37."""
    model = small_bn_model()
    xa, ya = xy(7, 1)
    xb, yb = xy(30, 2)
    sent = []

    def record(values, name):  # what this rank contributes to the allreduce
        sent.append(np.array(values, dtype=np.float64))
        return np.array(values, dtype=np.float64)

    monkeypatch.setattr(distributed, "allreduce_sum", record)
    model.evaluate(xb, yb, verbose=0)
    global_results(model.metrics)  # the other rank's states, as it sends them
    other_rank = sent[-1]
    model.evaluate(xa, ya, verbose=0)
    before = metric_states(model)
    monkeypatch.setattr(distributed, "allreduce_sum", lambda values, name: np.asarray(values) + other_rank)
    combined = global_results(model.metrics)
    # the metric variables are left as they were
    assert all(np.array_equal(x, y) for x, y in zip(metric_states(model), before))
    whole = model.evaluate(np.concatenate([xa, xb]), np.concatenate([ya, yb]), verbose=0, return_dict=True,
                           batch_size=37)
    assert combined["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert combined["accuracy"] == pytest.approx(whole["accuracy"], rel=1e-6)


def test_metric_average_single_process_keeps_values(hvd_single):
    model, plain = small_bn_model(), small_bn_model()
    plain.set_weights(model.get_weights())
    x, y = xy(32, 0)
    history = model.fit(x, y, epochs=2, validation_data=xy(10, 1), verbose=0, shuffle=False,
                        callbacks=[MetricAverageCallback()])
    expected = plain.fit(x, y, epochs=2, validation_data=xy(10, 1), verbose=0, shuffle=False)
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert history.history[key] == pytest.approx(expected.history[key], rel=1e-5), key


def test_metric_average_reads_training_metrics_before_validation_resets_them(hvd_single):
    model = small_bn_model()
    cb = attach(MetricAverageCallback(), model)
    model.evaluate(*xy(20, 3), verbose=0)  # stands in for the training epoch's metric states
    train_results = {k: float(v) for k, v in model.get_metrics_result().items()}
    cb.on_epoch_begin(0)
    cb.on_test_begin()  # validation starts: training states are read here
    val = model.evaluate(*xy(9, 4), verbose=0, return_dict=True)
    logs = {"loss": -1.0, "accuracy": -1.0, "val_loss": -1.0, "val_accuracy": -1.0, "lr": 0.5}
    cb.on_epoch_end(0, logs)
    assert logs["loss"] == pytest.approx(train_results["loss"])
    assert logs["accuracy"] == pytest.approx(train_results["accuracy"])
    assert logs["val_loss"] == pytest.approx(val["loss"])
    assert logs["val_accuracy"] == pytest.approx(val["accuracy"])
    assert logs["lr"] == 0.5


def test_batch_frequency_must_be_positive():
    with pytest.raises(ValueError, match="batch_frequency must be >= 1 or None; received: batch_frequency=0"):
        MetricAverageCallback(batch_frequency=0)


def test_each_outputs_loss_and_metrics_are_exact_over_uneven_parts(hvd_single, monkeypatch):
    """A model of two outputs with sample weights: every key evaluate gives (the total loss, each output's loss and
    metrics) comes from summed metric states, none from a mean of per-rank values."""
    from hvdkeras.runtime import compat

    keras = compat.keras
    inputs = keras.Input((3,), name="x")
    hidden = keras.layers.Dense(4, activation="relu")(inputs)
    model = keras.Model(inputs, {"buy": keras.layers.Dense(1, activation="sigmoid", name="buy")(hidden),
                                 "price": keras.layers.Dense(1, name="price")(hidden)})
    model.compile("sgd", loss={"buy": "binary_crossentropy", "price": "mse"}, loss_weights={"buy": 1.0, "price": 0.3},
                  metrics={"buy": ["binary_accuracy"], "price": ["mae"]}, weighted_metrics=[])
    # as the trainer and MetricAverageCallback.set_model do: Keras 3 would count the last, smaller batch of each
    # part (6 and 7 examples, of unknown size) as one example in buy_loss and price_loss
    compat.count_examples_in_output_losses(model)
    rng = np.random.RandomState(0)

    def part(n):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        return x, {"buy": (x[:, :1] > 0).astype(np.float32), "price": x[:, 1:2] * 3}, rng.uniform(0.5, 2, n)

    (xa, ya, wa), (xb, yb, wb) = part(7), part(30)
    sent = []
    monkeypatch.setattr(distributed, "allreduce_sum", lambda values, name: sent.append(np.array(values)) or values)
    model.evaluate(xb, yb, sample_weight=wb, verbose=0, batch_size=8)
    global_results(model.metrics)
    other_rank = sent[-1]
    model.evaluate(xa, ya, sample_weight=wa, verbose=0, batch_size=8)
    monkeypatch.setattr(distributed, "allreduce_sum", lambda values, name: np.asarray(values) + other_rank)
    combined = global_results(model.metrics)
    whole = model.evaluate(np.concatenate([xa, xb]), {k: np.concatenate([ya[k], yb[k]]) for k in ya},
                           sample_weight=np.concatenate([wa, wb]), verbose=0, return_dict=True, batch_size=37)
    assert set(whole) == {"loss", "buy_loss", "price_loss", "buy_binary_accuracy", "price_mae"} <= set(combined)
    for key in whole:
        assert combined[key] == pytest.approx(whole[key], rel=1e-5), key
