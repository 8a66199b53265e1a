"""Learning-rate warmup and schedule callbacks, batch by batch, through their hooks on a real optimizer."""
import math

import numpy as np
import pytest
import tensorflow as tf

from hvdkeras.callbacks import LearningRateScheduleCallback, LearningRateWarmupCallback
from hvdkeras.common import schedules
from hvdkeras.gradient_exchange import DistributedOptimizer
from hvdkeras.runtime import compat
from hvdkeras.runtime.compat import keras
from tests.unit.helpers import attach, drive, lr_of, model_and_data, regression_model


def test_warmup_batch_by_batch_lands_exactly():
    size, initial_lr, warmup, steps = 4, 0.4, 2, 5
    model = regression_model()
    cbs = [LearningRateWarmupCallback(initial_lr, warmup_epochs=warmup, size=size),
           LearningRateScheduleCallback(initial_lr, 1.0, start_epoch=warmup)]
    per_batch, per_epoch = drive(cbs, model, epochs=4, steps=steps)
    for epoch, batch, lr in per_batch:
        e = epoch + batch / steps
        expected = initial_lr / size * (e * (size - 1) / warmup + 1) if e < warmup else initial_lr
        assert lr == pytest.approx(expected, rel=1e-6), (epoch, batch)
    assert per_batch[0][2] == pytest.approx(initial_lr / size, rel=1e-6)
    # strictly increasing during warmup
    warm = [lr for epoch, batch, lr in per_batch if epoch < warmup]
    assert all(b > a for a, b in zip(warm, warm[1:]))
    # after the last warmup epoch the optimizer holds exactly initial_lr (float32)
    assert per_epoch[warmup - 1] == pytest.approx(np.float32(initial_lr), abs=0)


@pytest.mark.parametrize("size", [1, 2, 8])
def test_warmup_from_a_given_start_is_the_same_on_any_number_of_ranks(size):
    """start_lr (the reference batch's rate) instead of Horovod's initial_lr / size: no rank count in the curve."""
    steps = 4
    per_batch, per_epoch = drive([LearningRateWarmupCallback(0.1, warmup_epochs=2, size=size, start_lr=0.05)],
                                 regression_model(), epochs=2, steps=steps)
    for epoch, batch, lr in per_batch:
        assert lr == pytest.approx(0.05 + 0.05 * (epoch + batch / steps) / 2, rel=1e-6), (epoch, batch)
    assert per_epoch[1] == pytest.approx(np.float32(0.1), abs=0)


def test_warmup_works_with_tf215_keras_optimizers():
    """Horovod 0.28.1's own warmup raises AttributeError here; ours must not."""
    for opt in (keras.optimizers.SGD(0.1, momentum=0.9), keras.optimizers.Adam(0.1), keras.optimizers.RMSprop(0.1)):
        model = regression_model(optimizer=opt)
        per_batch, _ = drive([LearningRateWarmupCallback(0.1, warmup_epochs=1, size=2)], model, epochs=1, steps=2)
        assert per_batch[0][2] == pytest.approx(0.05)


def test_warmup_under_loss_scaling_reads_and_sets_the_inner_rate(hvd_single):
    """mixed_float16 puts a LossScaleOptimizer around the distributed one: the rate is the inner optimizer's."""
    compat.set_mixed_precision("mixed_float16")
    try:
        model = regression_model(optimizer=DistributedOptimizer(keras.optimizers.SGD(0.2, momentum=0.9)))
    finally:
        compat.set_mixed_precision("none")
    assert hasattr(model.optimizer, "inner_optimizer")  # loss scaling
    compat.build_optimizer(model.optimizer, model.trainable_variables)
    for v in compat.momentum_buffers(model.optimizer):
        v.assign(tf.ones_like(v))
    per_batch, per_epoch = drive([LearningRateWarmupCallback(0.1, warmup_epochs=1, size=2)], model, epochs=1, steps=2)
    assert [lr for _, _, lr in per_batch] == pytest.approx([0.05, 0.075])
    assert per_epoch == pytest.approx([0.1]) and compat.get_learning_rate(model.optimizer) == pytest.approx(0.1)
    for v in compat.momentum_buffers(model.optimizer):  # momentum correction: rescaled by 0.1 / 0.2 in all
        np.testing.assert_allclose(v.numpy(), 0.5, rtol=1e-6)


def test_resume_mid_warmup_continues_the_curve():
    steps = 4
    full, _ = drive([LearningRateWarmupCallback(1.0, warmup_epochs=3, size=2)], regression_model(), epochs=3,
                    steps=steps)
    resumed, _ = drive([LearningRateWarmupCallback(1.0, warmup_epochs=3, size=2)], regression_model(), epochs=3,
                       steps=steps, initial_epoch=2)
    assert [lr for e, b, lr in resumed] == pytest.approx([lr for e, b, lr in full if e == 2])


def test_step_schedule_staircase():
    model = regression_model()
    mult = schedules.step_decay([2, 4], 0.1)
    per_batch, per_epoch = drive([LearningRateScheduleCallback(1.0, mult, start_epoch=0)], model, epochs=6, steps=2)
    assert per_epoch == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01], rel=1e-6)


def test_cosine_per_batch_follows_the_multiplier():
    mult = schedules.cosine_decay(1, 5, end_fraction=0.1)
    model = regression_model()
    per_batch, _ = drive([LearningRateScheduleCallback(2.0, mult, start_epoch=1, staircase=False)], model,
                         epochs=5, steps=4)
    for epoch, batch, lr in per_batch:
        if epoch >= 1:
            e = epoch + batch / 4
            assert lr == pytest.approx(2.0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (e - 1) / 4))), rel=1e-6)


def test_schedule_rejects_learning_rate_schedule_with_clear_message():
    sched = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    model = regression_model(optimizer=keras.optimizers.SGD(sched))
    cb = LearningRateWarmupCallback(0.1, warmup_epochs=1, size=2)
    cb.set_model(model)
    cb.set_params({"steps": 2, "epochs": 1})
    with pytest.raises(TypeError, match="LearningRateSchedule"):
        cb.on_train_begin()


def test_warmup_needs_steps():
    cb = LearningRateWarmupCallback(0.1, warmup_epochs=1, size=2)
    cb.set_model(regression_model())
    cb.set_params({"steps": None, "epochs": 1})
    with pytest.raises(ValueError, match="steps_per_epoch"):
        cb.on_train_begin()


def test_fractional_warmup_reaches_initial_lr_mid_epoch():
    model = regression_model()
    per_batch, _ = drive([LearningRateWarmupCallback(1.0, warmup_epochs=1.5, size=2),
                          LearningRateScheduleCallback(1.0, schedules.step_decay([3], 0.1), start_epoch=1.5)],
                         model, epochs=4, steps=4)
    by_epoch = {(e, b): lr for e, b, lr in per_batch}
    assert by_epoch[(1, 1)] == pytest.approx(0.5 * (1.25 / 1.5 + 1), rel=1e-6)
    assert by_epoch[(1, 2)] == by_epoch[(1, 3)] == by_epoch[(2, 0)] == 1.0
    assert by_epoch[(3, 0)] == pytest.approx(0.1, rel=1e-6)


def test_initial_batch_keeps_the_schedule_position_in_a_partial_epoch():
    """An elastic restart at batch 3 of epoch 1 continues the warmup curve where it was."""
    full, _ = drive([LearningRateWarmupCallback(1.0, warmup_epochs=2, size=2)], regression_model(), epochs=2, steps=5)
    cb = LearningRateWarmupCallback(1.0, warmup_epochs=2, size=2, steps_per_epoch=5, initial_batch=3)
    model = regression_model()
    cb.set_model(model)
    cb.set_params({"epochs": 2, "steps": 2})
    cb.on_train_begin()
    cb.on_epoch_begin(1)
    seen = []
    for b in range(2):
        cb.on_train_batch_begin(b)
        seen.append(lr_of(model))
    assert seen == pytest.approx([lr for e, b, lr in full if e == 1 and b >= 3])


def test_schedule_initial_batch_counts_from_the_resumed_batch_in_the_first_epoch_only():
    mult = schedules.cosine_decay(0, 2)
    full, _ = drive([LearningRateScheduleCallback(1.0, mult, staircase=False)], regression_model(), epochs=2, steps=5)
    model = regression_model()
    cb = attach(LearningRateScheduleCallback(1.0, mult, staircase=False, steps_per_epoch=5, initial_batch=3), model,
                epochs=2, steps=2)
    cb.on_train_begin()
    seen = []
    for epoch, batches in ((0, 2), (1, 5)):  # the rest of epoch 0 (batches 3 and 4), then all of epoch 1
        cb.on_epoch_begin(epoch)
        for batch in range(batches):
            cb.on_train_batch_begin(batch)
            seen.append(lr_of(model))
        cb.on_epoch_end(epoch, {})
    assert seen == pytest.approx([lr for e, b, lr in full if (e, b) >= (0, 3)])
    with pytest.raises(ValueError, match="initial_batch must be >= 0"):
        LearningRateScheduleCallback(1.0, 1.0, initial_batch=-1)


def test_momentum_correction_rescales_velocity_by_the_rate_ratio(hvd_single):
    model, x, y = model_and_data(lr=0.2)
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)  # velocity slots now hold something
    cb = attach(LearningRateScheduleCallback(0.2, multiplier=0.25, start_epoch=1), model, epochs=3, steps=4)
    cb.on_train_begin()
    before = [v.numpy().copy() for v in model.optimizer.momentums]
    cb.on_epoch_begin(1)  # lr 0.2 -> 0.05
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.05)
    for a, v in zip(before, model.optimizer.momentums):
        np.testing.assert_allclose(v.numpy(), a * 0.25, rtol=1e-6)
    cb.on_epoch_begin(2)  # no change: no rescale
    for a, v in zip(before, model.optimizer.momentums):
        np.testing.assert_allclose(v.numpy(), a * 0.25, rtol=1e-6)


def test_momentum_correction_off_and_for_adam(hvd_single):
    model, x, y = model_and_data()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    cb = attach(LearningRateScheduleCallback(0.1, 0.5, momentum_correction=False), model, epochs=1, steps=4)
    cb.on_train_begin()
    before = [v.numpy().copy() for v in model.optimizer.momentums]
    cb.on_epoch_begin(0)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.optimizer.momentums))

    adam = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    adam.compile(keras.optimizers.Adam(0.1), "mse")
    cb = attach(LearningRateScheduleCallback(0.1, 0.5), adam, epochs=1, steps=4)
    cb.on_train_begin()
    cb.on_epoch_begin(0)
    assert float(adam.optimizer.learning_rate.numpy()) == pytest.approx(0.05)


def test_keras_learning_rate_schedule_as_multiplier_after_warmup(hvd_single):
    model, x, y = model_and_data()
    decay = keras.optimizers.schedules.CosineDecay(1.0, decay_steps=8)
    rec = []

    class Rec(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            rec.append(float(self.model.optimizer.learning_rate.numpy()))

    cbs = [LearningRateWarmupCallback(0.4, warmup_epochs=1, size=2),
           LearningRateScheduleCallback(0.4, decay, start_epoch=1), Rec()]
    model.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=cbs)
    assert rec[:4] == pytest.approx([0.2 * (b / 4 + 1) for b in range(4)], rel=1e-6)
    assert rec[4:] == pytest.approx([0.4 * float(decay(s)) for s in range(8)], rel=1e-5)


def test_a_resumed_partial_epoch_sets_its_first_batchs_rate_directly(hvd_single):
    # Through the epoch's start first, momentum would be rescaled twice: not bit for bit like
    # the run that was never interrupted.
    model, _, _ = model_and_data()
    cb = attach(LearningRateScheduleCallback(0.1, lambda epoch: 1.0 / (1 + epoch), start_epoch=0,
                                                staircase=False, steps_per_epoch=10, initial_batch=4),
                model, epochs=5, steps=6)
    compat.set_learning_rate(model.optimizer, 0.123)  # the restored rate
    cb.on_train_begin()
    cb.on_epoch_begin(2)
    assert compat.get_learning_rate(model.optimizer) == pytest.approx(0.123)  # untouched at the epoch start
    cb.on_train_batch_begin(0)
    assert compat.get_learning_rate(model.optimizer) == pytest.approx(0.1 / (1 + 2.4))
