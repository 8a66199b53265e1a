"""hvdkeras' DistributedOptimizer on two real ranks, on whichever stack runs the suite.

On Keras 3 it is hvdkeras' own (Horovod's allreduce per gradient, or grouped
requests); on Keras 2 Horovod's Keras DistributedOptimizer. The same call, the same
guarantees.
"""
import pytest

from tests.harness.ranks import results


@pytest.fixture(scope="module")
def gradient_job(api_and_gradients):
    """``scripts/gradient_check.py``'s part of the job it shares with the Keras API checks (``api_and_gradients`` in
    conftest.py): the gradient checks, then the default digits job with fp16 compression in the same two processes.
    ``(the shared job, {part: {rank: result}})``, the checks' part named ``checks``."""
    shared, _ = api_and_gradients
    parts = {}
    for res in results(shared.job_of("gradient_check", partial=True)):  # each part's tests check that part
        parts.setdefault(res.get("part", "checks"), {})[res["rank"]] = res
    return shared, parts


@pytest.fixture(scope="module")
def gradient_results(gradient_job):
    shared, parts = gradient_job
    found = parts.get("checks", {})
    assert sorted(found) == [0, 1], shared.job.output[-3000:]
    return found


@pytest.mark.parametrize("case", ["dense", "dense_one_group", "dense_two_groups", "embedding_sparse",
                                  "embedding_as_dense"])
def test_averaged_gradient_is_the_mean_of_the_ranks_gradients(gradient_results, case):
    for rank in (0, 1):
        res = gradient_results[rank][case]
        assert res["max_abs_error"] < 1e-6, res
        assert res["distance_from_local"] > 1e-4  # not simply this rank's own gradient


def test_embedding_gradients_are_sparse_when_sent_sparse(gradient_results):
    assert "IndexedSlices" in gradient_results[0]["embedding_sparse"]["gradient_types"]


def test_two_backward_passes_per_step_change_weights_every_second_batch(gradient_results):
    for rank in (0, 1):
        assert gradient_results[rank]["accumulation"]["changed_after_batch"] == [False, True] * 3
    assert gradient_results[0]["accumulation"]["final_digest"] == gradient_results[1]["accumulation"]["final_digest"]


@pytest.mark.parametrize("case, tolerance", [("op_sum", 1e-6), ("predivide", 1e-6), ("groups_of_variables", 1e-6),
                                             ("fp16", 2e-3), ("partial", 1e-6)])
def test_horovods_arguments_give_horovods_result(gradient_results, case, tolerance):
    """op=Sum: minus the sum; predivide: still the mean; groups of variables; fp16 within its precision;
    PartialDistributedOptimizer: the local layer moves by its own gradient / ranks, the rest by the mean."""
    for rank in (0, 1):
        res = gradient_results[rank][case]
        assert res["max_abs_error"] <= tolerance * max(1.0, res["scale"]), res


def test_fp16_compression_trains_the_default_job_to_the_same_accuracy(gradient_job):
    shared, parts = gradient_job
    shared.lines("gradient_check")  # it ran to its end on both ranks, and the job ended well
    found = parts.get("fp16_default_job", {})
    assert sorted(found) == [0, 1], shared.job.output[-3000:]
    assert found[0]["variables"] > 0 and found[0]["weights"] == found[1]["weights"]  # identical weights
    assert found[0]["final"] == found[1]["final"]
    assert found[0]["final"]["val_accuracy"] >= 0.90  # the default job's threshold (test_two_ranks), in 6 epochs
