"""hvdkeras.callbacks on two real Horovod ranks (scenarios in scripts/callbacks_check.py)."""
import os
import re

import pytest

from hvdkeras.runtime import compat
from tests.harness.ranks import SCRIPTS, horovodrun, rank_results, results

SCRIPT = os.path.join(SCRIPTS, "callbacks_check.py")


def run(scenario, tmp_path, *extra, check=True, timeout=180):
    job = horovodrun([SCRIPT, scenario, str(tmp_path), *extra], timeout=timeout, check=check)
    return job, rank_results(job)


# Every scenario but the killed rank's shares one job (one start of two ranks instead of nine): first those that end
# in a finished fit (or catch its error), then the NaN stop, and last the divergence that leaves the script with the
# guard's error, uncaught, as a user's script would (so the job exits non-zero); the killed rank runs alone.
SHARED = ("early_stopping", "reduce_lr", "uneven_validation", "metric_average", "warmup", "chief_writers",
          "diverge_perturbed")
ENDS_EARLY = ("nan", "diverge_plain")


def by_scenario(job):
    found = {}
    for res in results(job):
        found.setdefault(res["scenario"], {})[res["rank"]] = res
    return found


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """``(job, out_dir, {scenario: {rank: result}})`` of one job running every SHARED scenario, then ENDS_EARLY, in
    turn; it exits with the last one's error (a hang would exceed the timeout and fail here)."""
    out_dir = tmp_path_factory.mktemp("callbacks")
    job = horovodrun([SCRIPT, ",".join(SHARED + ENDS_EARLY), str(out_dir)], timeout=360, check=False)
    found = by_scenario(job)
    assert sorted(found) == sorted(SHARED + ("nan",)), job.output[-3000:]  # diverge_plain leaves before reporting
    return job, out_dir, found


@pytest.fixture(scope="module")
def ends_early(shared):
    """The shared job, read by the tests of ENDS_EARLY's scenarios."""
    return shared


def test_nan_on_one_rank_stops_both_at_the_same_batch(ends_early):
    job, _, found = ends_early
    assert sorted(found.get("nan", {})) == [0, 1], job.output[-3000:]
    res = found["nan"]
    assert res[0]["last_batch"] == res[1]["last_batch"] == [1, 3]  # epoch 2, batch 3: where rank 1 saw the NaN
    assert res[0]["epochs"] == res[1]["epochs"] == [0, 1]
    assert "another rank saw an invalid loss" in job.output


def test_early_stopping_on_rank_0s_decision_stops_both_ranks_at_the_same_epoch(shared):
    res = shared[2]["early_stopping"]
    # rank 0's signal stops improving after epoch 1; rank 1's alone would never stop
    assert res[0]["epochs"] == res[1]["epochs"] == [0, 1]
    assert res[0]["stopped_epoch"] == res[1]["stopped_epoch"] == 1


def test_reduce_lr_on_plateau_keeps_one_learning_rate(shared):
    res = shared[2]["reduce_lr"]
    assert res[0]["lr"] == res[1]["lr"] == pytest.approx(0.05 * 0.5 ** 2)
    assert res[0]["lrs"] == res[1]["lrs"]


def test_uneven_validation_shards_give_the_single_process_metric(shared):
    res = shared[2]["uneven_validation"]
    for r in (0, 1):
        logs, single = res[r]["logs"], res[r]["single"]
        assert logs["val_loss"] == pytest.approx(single["loss"], rel=1e-5)
        assert logs["val_accuracy"] == pytest.approx(single["accuracy"], abs=1e-6)
        assert logs["examples_per_sec"] > 0 and logs["step_time_s"] > 0
    # a mean of the two ranks' own metrics (7 and 5 examples) would be wrong
    naive = (res[0]["local"]["loss"] + res[1]["local"]["loss"]) / 2
    assert naive != pytest.approx(res[0]["single"]["loss"], rel=1e-4)
    assert res[0]["weights"] == res[1]["weights"]
    assert res[0]["logs"] == res[1]["logs"]


def test_metric_average_is_exact_on_uneven_shards(shared):
    """MetricAverageCallback's logs over uneven shards (7 and 30 examples) are one process's on all the data."""
    res = shared[2]["metric_average"]
    for r in (0, 1):
        logs, train, val = res[r]["logs"], res[r]["expected_train"], res[r]["expected_val"]
        assert logs["loss"] == pytest.approx(train["loss"], rel=1e-5)
        assert logs["accuracy"] == pytest.approx(train["accuracy"], rel=1e-6)
        assert logs["val_loss"] == pytest.approx(val["loss"], rel=1e-5)
        assert logs["val_accuracy"] == pytest.approx(val["accuracy"], rel=1e-6)
        assert res[r]["standalone"]["loss"] == pytest.approx(val["loss"], rel=1e-5)  # global_results alone
        assert logs["lr"] == pytest.approx(res[r]["mean_lr"])
        # and this differs from what a naive mean of per-rank means gives
        assert abs(res[r]["mean_of_means_val_loss"] - val["loss"]) > 1e-4
    assert res[0]["logs"] == res[1]["logs"]


def test_warmup_rates_per_batch_match_the_formula_on_both_ranks(shared):
    job, _, by_scenario = shared
    res = by_scenario["warmup"]
    steps, size, lr, warmup = 5, 2, 0.4, 2
    for r in (0, 1):
        for epoch, batch, seen in res[r]["lrs"]:
            e = epoch + batch / steps
            if e < warmup:
                expected = lr / size * (e * (size - 1) / warmup + 1)
            else:
                expected = lr * (0.1 if epoch >= 3 else 1.0)
            assert seen == pytest.approx(expected, rel=1e-6), (r, epoch, batch)
    assert res[0]["lrs"] == res[1]["lrs"] and res[0]["weights"] == res[1]["weights"]
    assert job.output.count("finished learning-rate warmup") >= 1


def test_backup_and_restore_resumes_every_rank_from_the_saved_state(tmp_path):
    first, _ = run("backup", tmp_path, "1", check=False)
    assert first.returncode != 0  # rank 1 was killed at the start of epoch 3
    assert sorted(os.listdir(tmp_path / "backup")) == ["epoch-0002"]

    _, res = run("backup", tmp_path, "2")
    for r in (0, 1):
        assert res[r]["saved_epoch"] == 2 and res[r]["saved_step"] == 10
        assert res[r]["at_start"] == res[r]["saved"]  # weights and optimizer state as saved
        assert res[r]["iterations"] == 10
        assert res[r]["epochs"] == [2, 3]  # continued with epoch 3
    assert res[0]["final"] == res[1]["final"]
    assert not (tmp_path / "backup").exists()  # Keras semantics: rank 0 removes it after a finished fit


def test_only_rank_0_writes_checkpoints_and_logs(shared):
    job, tmp_path, by_scenario = shared
    res = by_scenario["chief_writers"]
    assert res[1]["files"] == []
    assert not (tmp_path / "rank1").exists()
    files = res[0]["files"]
    assert "weights-02.weights.h5" in files and "weights-03.weights.h5" in files  # keep=2
    assert "weights-01.weights.h5" not in files
    assert "best.keras" in files and "log.csv" in files and "tb" in files
    if compat.TF_CHECKPOINT_WEIGHTS:  # Keras 2's multi-file weights prefix, moved into place atomically
        assert "tf-weights-03.index" in files and not any(f.startswith("tf-weights-02") for f in files)
    assert not any(f.startswith(".saving-") for f in files)  # no staging left behind
    # the progress bar is rank 0's alone (the shared job's warmup scenario prints its own "Epoch N: ..." line)
    assert not [line for line in job.output.splitlines() if re.match(r"\[1\]<stdout>:Epoch \d+/\d+", line)]
    assert [line for line in job.output.splitlines() if line.startswith("[0]<stdout>:Epoch 3/3")]
    with open(tmp_path / "rank0" / "log.csv") as f:
        assert len(f.read().strip().splitlines()) == 4  # header + 3 epochs


def test_a_rank_that_moves_a_weight_stops_every_rank_at_the_epoch_end_before_anything_is_saved(shared):
    _, _, found = shared
    res = found["diverge_perturbed"]
    for r in (0, 1):
        error = res[r]["error"]
        assert error == res[0]["error"] and "\n" not in error
        assert error.startswith("trainable weights differ between ranks at the end of epoch 2 (step 10):"
                                f" {res[r]['name']} is the first of 1 differing variables (rank 1 differs from rank 0);"
                                " the ranks are training apart, likely because of a custom train_step")
        assert res[r]["epochs"] == [0, 1]
        # epoch 1's checkpoints, written before the weight moved, are kept; nothing of epoch 2
        assert res[r]["backups"] == ["epoch-0001"] and res[r]["files"] == ["backup", "w-1.weights.h5"]


def test_ranks_that_train_alone_stop_together_before_the_first_checkpoint_and_the_job_fails(ends_early):
    job, out_dir, _ = ends_early
    assert job.returncode != 0
    line = ("DivergenceError: trainable weights differ between ranks at epoch 1, batch 3, before the checkpoint"
            " (step 3): ")
    for r in (0, 1):
        assert [x for x in job.output.splitlines() if x.startswith(f"[{r}]<stderr>:") and line in x], job.output[-3000:]
    assert not (out_dir / "plain").exists() or not os.listdir(out_dir / "plain")
