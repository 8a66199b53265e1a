"""hvdkeras.common.schedules: the learning-rate formulas as functions of the fractional epoch."""
import math

import pytest

from hvdkeras import config as config_lib
from hvdkeras.common import schedules


def test_warmup_formula_endpoints():
    assert schedules.warmup_lr(0.0, 0.8, 5, 0.2) == pytest.approx(0.2)
    assert schedules.warmup_lr(2.5, 0.8, 5, 0.2) == pytest.approx(0.5)
    assert schedules.warmup_lr(5.0, 0.8, 5, 0.2) == 0.8
    assert schedules.warmup_lr(7.0, 0.8, 5, 0.2) == 0.8
    assert schedules.warmup_lr(3.0, 0.8, 0, 0.2) == 0.8


def test_from_initial_over_size_it_is_horovods_formula():
    size = 4
    for epoch in (0.0, 1.3, 2.5, 4.9):
        horovod = 0.8 / size * (epoch * (size - 1) / 5 + 1)
        assert schedules.warmup_lr(epoch, 0.8, 5, 0.8 / size) == pytest.approx(horovod)


def test_step_decay_counts_the_boundaries_passed():
    mult = schedules.step_decay([2, 4], 0.1)
    assert [mult(e) for e in (0, 1.9, 2, 3, 4, 5)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])


def test_cosine_reaches_end_fraction():
    mult = schedules.cosine_decay(1, 5, end_fraction=0.1)
    assert mult(1) == pytest.approx(1.0)
    assert mult(3) == pytest.approx(0.1 + 0.9 * 0.5)
    assert mult(5) == pytest.approx(0.1)
    assert mult(2) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))


def test_polynomial():
    mult = schedules.polynomial_decay(0, 10, end_fraction=0.0, power=2.0)
    assert mult(5) == pytest.approx(0.25)
    assert mult(10) == 0.0


def test_multiplier_from_config_starts_the_decay_after_warmup():
    cfg = config_lib.load(None, ["schedule.name=cosine", "schedule.warmup_epochs=2", "trainer.epochs=10",
                                 "schedule.end_lr_fraction=0.5"])
    mult = schedules.multiplier_from_config(cfg.schedule, cfg.trainer.epochs)
    assert mult(2) == pytest.approx(1.0) and mult(6) == pytest.approx(0.75) and mult(10) == pytest.approx(0.5)
    assert schedules.multiplier_from_config(config_lib.ScheduleConfig(), 10)(7) == 1.0  # constant


@pytest.mark.parametrize("name, staircase", [("constant", True), ("step", True), ("cosine", False),
                                             ("polynomial", False)])
def test_the_staircase_rule_is_written_once(name, staircase):
    assert schedules.is_staircase(config_lib.ScheduleConfig(name=name)) is staircase


def test_the_rate_warms_up_per_batch_then_decays_per_epoch_or_per_batch():
    step = config_lib.load(None, ["schedule.name=step", "schedule.warmup_epochs=1", "schedule.boundaries=[2]",
                                  "trainer.epochs=4"])
    rate = schedules.rate_from_config(step.schedule, step.trainer.epochs, initial_lr=1.0, start_lr=0.5)
    assert rate(0.0) == 0.5 and rate(0.5) == pytest.approx(0.75)  # warmup, per batch
    assert rate(1.5) == 1.0 and rate(2.0) == pytest.approx(0.1) and rate(2.9) == pytest.approx(0.1)  # staircase
    cosine = config_lib.load(None, ["schedule.name=cosine", "trainer.epochs=4"])
    rate = schedules.rate_from_config(cosine.schedule, cosine.trainer.epochs, initial_lr=1.0, start_lr=1.0)
    assert rate(2.0) == pytest.approx(0.5) and rate(1.5) == pytest.approx(0.5 * (1 + math.cos(math.pi * 1.5 / 4)))
