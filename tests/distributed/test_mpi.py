"""The same jobs under MPI: ``mpirun -np 2`` and ``horovodrun --mpi``.

Runs where Horovod was built with MPI and OpenMPI's ``mpirun`` exists; elsewhere every
test here is skipped with the reason (``make install-mpi`` then ``make install`` adds it).
"""
import os
import re

import pytest

from tests.harness.ranks import SCRIPTS, horovodrun, mpi_skip_reason, read_jsonl
from tests.harness.ranks import results as job_results
from tests.harness.reports import DIGITS, REPORT, assert_identical_weights, reports, under
from tests.harness.stacks import once_per_make_test

REASON = mpi_skip_reason()
# What differs under MPI is the launcher and Horovod's MPI controller, not the stack: the trainer's own
# paths run on both stacks under Gloo.
pytestmark = [pytest.mark.skipif(REASON is not None, reason=f"MPI tests skipped: {REASON}"),
              once_per_make_test("the MPI launcher tests", 0.6, stack="keras3")]


@pytest.fixture(scope="module")
def digits_run_mpirun(tmp_path_factory):
    """The default job, exactly as configs/digits.yaml has it, on two ranks started by mpirun."""
    base = tmp_path_factory.mktemp("digits-mpirun")
    workdir, report_dir = base / "work", base / "report"
    job = horovodrun([REPORT, str(report_dir), str(workdir), DIGITS], timeout=420, launcher="mpirun")
    return job, workdir, reports(report_dir)


def test_default_job_under_mpirun_trains_identical_ranks_with_one_writer(digits_run_mpirun):
    job, workdir, reps = digits_run_mpirun
    assert reps[0]["final"]["val_accuracy"] >= 0.90
    assert_identical_weights(reps)
    assert reps[0]["final"] == reps[1]["final"]
    assert len([line for line in job.output.splitlines() if "final validation" in line]) == 1
    assert any("final validation" in line for line in job.lines_of(0))  # printed by rank 0
    assert under(reps[1]["written"], workdir) == []
    assert sorted(os.listdir(workdir / "checkpoints")) == ["epoch-0013", "epoch-0014", "epoch-0015"]


def test_default_job_under_mpirun_logs_metrics_of_the_whole_validation_set(digits_run_mpirun):
    _, workdir, reps = digits_run_mpirun
    records = read_jsonl(workdir / "metrics.jsonl")
    assert [r["epoch"] for r in records] == list(range(1, 16))
    single = reps[0]["single_process_eval"]
    assert records[-1]["val_accuracy"] == pytest.approx(single["accuracy"], abs=1e-6)
    assert records[-1]["val_loss"] == pytest.approx(single["loss"], rel=1e-4)


def test_horovodrun_mpi_trains_identical_ranks_and_resumes(tmp_path):
    """``horovodrun --mpi``: two epochs, then two more resumed from rank 0's checkpoint."""
    workdir = tmp_path / "work"
    quick = ["trainer.verbose=0", "checkpoint.keep=0"]
    horovodrun([REPORT, str(tmp_path / "r1"), str(workdir), DIGITS, "trainer.epochs=2", *quick], launcher="mpi")
    job = horovodrun([REPORT, str(tmp_path / "r2"), str(workdir), DIGITS, "trainer.epochs=4", *quick],
                     launcher="mpi")
    # rank 1's start line (OpenMPI may put another rank's output on the same line, not inside this text)
    assert re.search(r"rank 1/2\b[^\n]*resuming after epoch 2", job.output), job.output[-3000:]
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2, 3, 4]
    reps = reports(tmp_path / "r2")
    assert_identical_weights(reps)
    assert under(reps[1]["written"], workdir) == []


def test_metric_average_is_exact_under_mpirun():
    job = horovodrun([os.path.join(SCRIPTS, "metric_average_check.py")], timeout=180, launcher="mpirun")
    results = job_results(job)
    assert len(results) == 2
    for res in results:
        assert res["logs"]["val_loss"] == pytest.approx(res["expected_val"]["loss"], rel=1e-5)
    assert results[0]["logs"] == results[1]["logs"]


def test_config_error_under_mpirun_is_one_line(tmp_path):
    job = horovodrun(["-m", "hvdkeras.train", "--config", DIGITS, "--workdir", str(tmp_path / "w"),
                      "--set", "trainer.epochz=3"], timeout=120, check=False, launcher="mpirun")
    assert job.returncode != 0
    errors = [line for line in job.output.splitlines() if "hvdkeras: error:" in line]
    assert errors and "trainer.epochz" in errors[0]
    assert not (tmp_path / "w").exists()

