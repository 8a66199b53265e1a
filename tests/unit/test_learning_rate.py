"""Warmup and schedule formulas, batch by batch, through the callbacks' hooks on a real optimizer."""
import math

import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import schedules
from hvdkeras.callbacks import LearningRateScheduleCallback, LearningRateWarmupCallback

keras = tf.keras


def make_model(lr=0.1, optimizer=None):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer or keras.optimizers.SGD(learning_rate=lr, momentum=0.9), loss="mse")
    return model


def lr_of(model):
    return float(model.optimizer.learning_rate.numpy())


def drive(callbacks, model, epochs, steps, initial_epoch=0):
    """Calls the hooks as model.fit would; returns the rate seen by every batch and after each epoch."""
    for cb in callbacks:
        cb.set_model(model)
        cb.set_params({"epochs": epochs, "steps": steps, "verbose": 0})
        cb.on_train_begin()
    per_batch, per_epoch = [], []
    for epoch in range(initial_epoch, epochs):
        for cb in callbacks:
            cb.on_epoch_begin(epoch)
        for batch in range(steps):
            for cb in callbacks:
                cb.on_train_batch_begin(batch)
            per_batch.append((epoch, batch, lr_of(model)))
            for cb in callbacks:
                cb.on_train_batch_end(batch)
        logs = {}
        for cb in callbacks:
            cb.on_epoch_end(epoch, logs)
        per_epoch.append(logs["lr"])
    return per_batch, per_epoch


def test_warmup_formula_endpoints():
    assert schedules.warmup_lr(0.0, 0.8, 5, 4) == pytest.approx(0.2)
    assert schedules.warmup_lr(2.5, 0.8, 5, 4) == pytest.approx(0.2 * (2.5 * 3 / 5 + 1))
    assert schedules.warmup_lr(5.0, 0.8, 5, 4) == 0.8
    assert schedules.warmup_lr(7.0, 0.8, 5, 4) == 0.8
    assert schedules.warmup_lr(3.0, 0.8, 0, 4) == 0.8


def test_warmup_batch_by_batch_lands_exactly():
    size, initial_lr, warmup, steps = 4, 0.4, 2, 5
    model = make_model()
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


def test_warmup_works_with_tf215_keras_optimizers():
    """Horovod 0.28.1's own warmup raises AttributeError here; ours must not."""
    for opt in (keras.optimizers.SGD(0.1, momentum=0.9), keras.optimizers.Adam(0.1), keras.optimizers.RMSprop(0.1)):
        model = make_model(optimizer=opt)
        per_batch, _ = drive([LearningRateWarmupCallback(0.1, warmup_epochs=1, size=2)], model, epochs=1, steps=2)
        assert per_batch[0][2] == pytest.approx(0.05)


def test_warmup_under_loss_scaling_reads_and_sets_the_inner_rate(hvd_single):
    """mixed_float16 puts a LossScaleOptimizer around the distributed one: the rate is the inner optimizer's."""
    from hvdkeras import compat, optimizers

    compat.set_mixed_precision("mixed_float16")
    try:
        model = make_model(optimizer=optimizers.DistributedOptimizer(keras.optimizers.SGD(0.2, momentum=0.9)))
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


def test_xla_step_under_loss_scaling_trains_and_logs_the_loss(hvd_single):
    """runtime.jit_compile with mixed_float16: the replaced train step updates the weights and the loss metric."""
    from hvdkeras import compat, optimizers

    compat.set_mixed_precision("mixed_float16")
    try:
        model = make_model(optimizer=optimizers.DistributedOptimizer(keras.optimizers.SGD(0.1)))
    finally:
        compat.set_mixed_precision("none")
    optimizers.use_xla_gradients(model)
    before = [v.numpy().copy() for v in model.trainable_variables]
    x = np.random.RandomState(0).randn(8, 3).astype("float32") * 0.01  # no float16 overflow at the initial scale
    history = model.fit(x, 2 * x[:, :2], batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert history.history["loss"][0] > 0
    assert int(model.optimizer.iterations.numpy()) == 2
    assert all(not np.array_equal(a, v.numpy()) for a, v in zip(before, model.trainable_variables))


def test_resume_mid_warmup_continues_the_curve():
    steps = 4
    full, _ = drive([LearningRateWarmupCallback(1.0, warmup_epochs=3, size=2)], make_model(), epochs=3, steps=steps)
    resumed, _ = drive([LearningRateWarmupCallback(1.0, warmup_epochs=3, size=2)], make_model(), epochs=3,
                       steps=steps, initial_epoch=2)
    assert [lr for e, b, lr in resumed] == pytest.approx([lr for e, b, lr in full if e == 2])


def test_step_schedule_staircase():
    model = make_model()
    mult = schedules.step_decay([2, 4], 0.1)
    per_batch, per_epoch = drive([LearningRateScheduleCallback(1.0, mult, start_epoch=0)], model, epochs=6, steps=2)
    assert per_epoch == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01], rel=1e-6)


def test_cosine_per_batch_reaches_end_fraction():
    mult = schedules.cosine_decay(1, 5, end_fraction=0.1)
    assert mult(1) == pytest.approx(1.0)
    assert mult(3) == pytest.approx(0.1 + 0.9 * 0.5)
    assert mult(5) == pytest.approx(0.1)
    model = make_model()
    per_batch, _ = drive([LearningRateScheduleCallback(2.0, mult, start_epoch=1, staircase=False)], model,
                         epochs=5, steps=4)
    for epoch, batch, lr in per_batch:
        if epoch >= 1:
            e = epoch + batch / 4
            assert lr == pytest.approx(2.0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (e - 1) / 4))), rel=1e-6)


def test_polynomial():
    mult = schedules.polynomial_decay(0, 10, end_fraction=0.0, power=2.0)
    assert mult(5) == pytest.approx(0.25)
    assert mult(10) == 0.0


def test_schedule_rejects_learning_rate_schedule_with_clear_message():
    sched = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    model = make_model(optimizer=keras.optimizers.SGD(sched))
    cb = LearningRateWarmupCallback(0.1, warmup_epochs=1, size=2)
    cb.set_model(model)
    cb.set_params({"steps": 2, "epochs": 1})
    with pytest.raises(TypeError, match="LearningRateSchedule"):
        cb.on_train_begin()


def test_warmup_needs_steps():
    cb = LearningRateWarmupCallback(0.1, warmup_epochs=1, size=2)
    cb.set_model(make_model())
    cb.set_params({"steps": None, "epochs": 1})
    with pytest.raises(ValueError, match="steps_per_epoch"):
        cb.on_train_begin()


def test_fractional_warmup_reaches_initial_lr_mid_epoch():
    model = make_model()
    per_batch, _ = drive([LearningRateWarmupCallback(1.0, warmup_epochs=1.5, size=2),
                          LearningRateScheduleCallback(1.0, schedules.step_decay([3], 0.1), start_epoch=1.5)],
                         model, epochs=4, steps=4)
    by_epoch = {(e, b): lr for e, b, lr in per_batch}
    assert by_epoch[(1, 1)] == pytest.approx(0.5 * (1.25 / 1.5 + 1), rel=1e-6)
    assert by_epoch[(1, 2)] == by_epoch[(1, 3)] == by_epoch[(2, 0)] == 1.0
    assert by_epoch[(3, 0)] == pytest.approx(0.1, rel=1e-6)


def test_resnet_yaml_schedule_at_chosen_steps(hvd_single, tmp_path):
    """resnet.yaml on 8 ranks: warmup 0.05 -> 0.4 over 5 epochs, then x0.1 at epochs 30, 60 and 80, to epoch 90."""
    import os

    from hvdkeras import callbacks as hc
    from hvdkeras import config as config_lib
    from hvdkeras import optimizers
    from hvdkeras.trainer import callbacks_for

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cfg = config_lib.load(os.path.join(repo, "configs", "resnet.yaml"))
    size, steps = 8, 1281167 // cfg.data.global_batch_size
    scaled = optimizers.scaled_learning_rate(cfg.optimizer, size, cfg.data.global_batch_size)
    assert scaled == pytest.approx(0.4)
    cbs = [cb for cb in callbacks_for(cfg, scaled, steps, size, str(tmp_path))
           if isinstance(cb, (hc.LearningRateWarmupCallback, hc.LearningRateScheduleCallback))]
    model = make_model()
    for cb in cbs:
        cb.set_model(model)
        cb.set_params({"epochs": 90, "steps": steps})
        cb.on_train_begin()

    def lr_at(epoch, batch):
        for cb in cbs:
            cb.on_epoch_begin(epoch)
        for cb in cbs:
            cb.on_train_batch_begin(batch)
        return lr_of(model)

    warm = lambda e: 0.4 / size * (e * (size - 1) / 5 + 1)  # noqa: E731
    expected = {
        (0, 0): 0.05,
        (0, 600): warm(600 / steps),
        (2, 0): warm(2),
        (4, steps - 1): warm(4 + (steps - 1) / steps),
        (5, 0): 0.4,
        (29, steps - 1): 0.4,
        (30, 0): 0.04,
        (59, steps - 1): 0.04,
        (60, 0): 0.004,
        (80, 0): 0.0004,
        (89, steps - 1): 0.0004,  # the last step
    }
    for (epoch, batch), lr in expected.items():
        assert lr_at(epoch, batch) == pytest.approx(lr, rel=1e-5), (epoch, batch)


def test_batch_offset_keeps_the_schedule_position_in_a_partial_epoch():
    """An elastic restart at batch 3 of epoch 1 continues the warmup curve where it was."""
    full, _ = drive([LearningRateWarmupCallback(1.0, warmup_epochs=2, size=2)], make_model(), epochs=2, steps=5)
    cb = LearningRateWarmupCallback(1.0, warmup_epochs=2, size=2, steps_per_epoch=5)
    cb.batch_offset = 3
    model = make_model()
    cb.set_model(model)
    cb.set_params({"epochs": 2, "steps": 2})
    cb.on_train_begin()
    cb.on_epoch_begin(1)
    seen = []
    for b in range(2):
        cb.on_train_batch_begin(b)
        seen.append(lr_of(model))
    assert seen == pytest.approx([lr for e, b, lr in full if e == 1 and b >= 3])
