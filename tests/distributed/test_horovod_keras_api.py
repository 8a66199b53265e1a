"""Horovod's Keras API (``import hvdkeras.keras as hvd``) on two real ranks, checked against Horovod's semantics.

One script (``scripts/horovod_keras_api.py``) runs every check in the same order on both
ranks, in the job it shares with ``test_gradient_exchange.py``'s checks, after them (``api_and_gradients``
in conftest.py); the tests read its results. The gradient arithmetic of ``DistributedOptimizer``'s
arguments is in ``test_gradient_exchange.py``.
"""
import pytest

from tests.harness.ranks import rank_results


@pytest.fixture(scope="module")
def api(api_and_gradients):
    """Each rank's ``RESULT`` of ``scripts/horovod_keras_api.py``, whose job it shares with the gradient checks
    (``api_and_gradients`` in conftest.py)."""
    shared, _ = api_and_gradients
    results = rank_results(shared.job_of("horovod_keras_api"))
    assert sorted(results) == [0, 1], shared.job.output[-3000:]
    return results


def both(api, check):
    return api[0][check], api[1][check]


@pytest.mark.parametrize("kind", ["lazy_sequential", "lazy_subclassed"])
def test_a_model_built_by_its_first_step_is_equal_on_every_rank_right_after_it(api, kind):
    """Horovod's MNIST example's Sequential has no Input: weights appear in step one, different on each rank."""
    r0, r1 = both(api, kind)
    assert r0["first_batch_begin"] is None and r1["first_batch_begin"] is None  # no weights before the first step
    assert r0["first_batch_end"] == r1["first_batch_end"]
    assert r0["final"] == r1["final"] and r0["optimizer"] == r1["optimizer"]


def test_a_built_model_starts_its_first_step_from_rank_0s_weights(api):
    r0, r1 = both(api, "built")
    assert r0["first_batch_begin"] == r1["first_batch_begin"]  # before any gradient: broadcast in on_train_begin
    assert r0["final"] == r1["final"]


def test_warmup_and_schedules_set_horovods_documented_rates_per_batch_and_log_them(api):
    """Warmup: lr/size -> lr over 2 epochs, per batch; then initial * 0.5 (epoch 2); then initial * f(3) = 0.1x."""
    initial, size, steps = 0.2, 2, 4
    warmup = [initial / size * ((e + b / steps) * (size - 1) / 2 + 1) for e in range(2) for b in range(steps)]
    expected = warmup + [initial * 0.5] * steps + [initial * 0.1] * steps
    for rank in (0, 1):
        rates = api[rank]["learning_rates"]
        assert rates["per_batch"] == pytest.approx(expected, rel=1e-6)
        # the rate at each epoch's end: the last warmup batch's, then exactly initial at the warmup's end
        assert rates["logged"] == pytest.approx([warmup[steps - 1], initial, initial * 0.5, initial * 0.1], rel=1e-6)


def test_averaged_metrics_are_equal_on_every_rank_and_exact_over_uneven_shards(api):
    r0, r1 = both(api, "metric_average")
    assert r0["logs"] == r1["logs"]
    assert r0["logs"]["val_accuracy"] == pytest.approx(r0["exact_val_accuracy"], abs=1e-6)
    assert r0["exact_val_accuracy"] == r1["exact_val_accuracy"]
    # the shards are uneven enough that a mean of the ranks' accuracies would differ
    assert r0["mean_of_means"] != pytest.approx(r0["exact_val_accuracy"], abs=1e-3)


def test_the_distributed_optimizer_round_trips_its_config(api):
    for rank in (0, 1):
        res = api[rank]["optimizer_config"]
        assert res == {"class": "SGD", "is_sgd": True, "same_config": True, "same_class": True,
                       "learning_rate": pytest.approx(0.1), "register_local_var": True}


def test_load_model_restores_the_optimizer_state_and_wraps_it_again(api):
    r0, r1 = both(api, "load_model")
    assert r0["weights_as_saved"] is True
    for res in (r0, r1):
        assert res["optimizer"] == "Adam" and res["distributed"] and res["plain_keras_loads"]
        assert res["iterations"] == 4  # 32 examples in batches of 8: the saved step count
    assert r0["after_step"] == r1["after_step"]  # a step on different data: the loaded optimizer averages


def test_local_variables_are_left_alone_by_the_broadcast(api):
    r0, r1 = both(api, "local_variables")
    assert (r0["offset"], r1["offset"]) == (1.0, 2.0)
    assert r0["shared"] == r1["shared"]


def test_keras_state_syncs_from_rank_0_and_restores_the_last_commit(api):
    r0, r1 = both(api, "elastic_state")
    assert r0["synced"] == r1["synced"]
    for res in (r0, r1):
        assert res["epoch_after_sync"] == 5 and res["restored"] and res["batch_after_restore"] == 0


def test_hvd_elastic_run_under_a_static_launch_trains_to_the_end(api):
    r0, r1 = both(api, "elastic_run")
    for res in (r0, r1):
        assert (res["epoch"], res["batch"], res["resets"]) == (3, 0, 0)
    assert r0["final"] == r1["final"]


def test_partial_distributed_optimizer_keeps_a_lazily_built_local_layer_local(api):
    r0, r1 = both(api, "partial_lazily_built")
    assert r0["local"] != r1["local"]
    assert r0["shared"] == r1["shared"]


def test_collectives_and_process_state_have_horovods_values(api):
    for rank in (0, 1):
        res = api[rank]["collectives"]
        assert res["allreduce"] == 1.5 and res["allreduce_sum"] == 3.0
        assert res["allgather"] == [0, 1] and res["broadcast"] == 7.0
        assert res["reducescatter"] == ([[1.5, 3.0]] if rank == 0 else [[4.5, 6.0]])
        assert "BroadcastGlobalVariablesCallback(0)" in res["broadcast_global_variables"]
        assert res["process"] == [rank, 2, rank, 2, 0, 1, True, True, False, True]


def test_best_model_checkpoint_writes_the_best_model(api):
    assert api[0]["best_checkpoint"]["exists"] and api[1]["best_checkpoint"]["exists"]
