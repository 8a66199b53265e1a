"""Two real Horovod ranks on this machine (Gloo), through the same entry points users run."""
import json
import os
import re

import pytest

from tests.harness.ranks import SCRIPTS, horovodrun, read_jsonl
from tests.harness.ranks import results as job_results
from tests.harness.reports import DIGITS, REPORT, assert_identical_weights, reports, under
from tests.harness.stacks import once_per_make_test


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """The default job, exactly as configs/digits.yaml has it, on two ranks."""
    base = tmp_path_factory.mktemp("digits")
    workdir, report_dir = base / "work", base / "report"
    job = horovodrun([REPORT, str(report_dir), str(workdir), DIGITS], timeout=420, command_lines=True)
    return job, workdir, reports(report_dir)


def test_default_job_reaches_accuracy_and_prints_it_once(digits_run):
    job, workdir, reps = digits_run
    assert reps[0]["final"]["val_accuracy"] >= 0.90
    final_lines = [line for line in job.output.splitlines() if "final validation" in line]
    assert len(final_lines) == 1 and final_lines[0].startswith("[0]<stdout>:")


def test_no_process_has_the_rendezvous_secret_on_its_command_line(digits_run):
    # ps shows every process's arguments to every local user; the ranks get the secret in their environment
    seen = digits_run[0].command_lines
    assert seen.secrets and seen.scans > 10, (seen.secrets, seen.scans)
    assert seen.exposed() == []


def test_weights_identical_on_both_ranks(digits_run):
    _, _, reps = digits_run
    assert_identical_weights(reps)
    assert reps[0]["final"] == reps[1]["final"]  # every rank returns the same global metrics


def test_only_rank_0_writes_into_the_workdir(digits_run):
    _, workdir, reps = digits_run
    assert under(reps[1]["written"], workdir) == []
    rank0 = under(reps[0]["written"], workdir)
    assert any(p.endswith("config.yaml") for p in rank0)
    assert any(p.endswith("metrics.jsonl") for p in rank0)
    assert any("/checkpoints/" in p and p.endswith("ckpt") for p in rank0)
    assert any(p.endswith("/export/model.keras") for p in rank0) and any(p.endswith("/export/saved_model")
                                                                       for p in rank0)
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.yaml", "export", "metrics.jsonl"]
    assert sorted(os.listdir(workdir / "checkpoints")) == ["epoch-0013", "epoch-0014", "epoch-0015"]


def test_each_rank_runs_on_its_own_block_of_the_cores(digits_run):
    """runtime.cpu_binding: auto, the default: every thread of local rank r of 2 (TensorFlow's, Horovod's,
    Gloo's) on cores[r*n//2:(r+1)*n//2] of the n the ranks share, and the start line says so."""
    from hvdkeras.common import horovod_env

    shared = horovod_env.shared_cpus()
    if len(shared) < 2 or set(horovod_env.allowed_cpus()) != set(shared):
        pytest.skip(f"needs two unbound cores; this process may use {horovod_env.allowed_cpus()} of {shared}")
    job, _, reps = digits_run
    n = len(shared)
    for rank in (0, 1):
        block = list(shared[rank * n // 2:(rank + 1) * n // 2])
        assert reps[rank]["thread_cpus"] == [block], reps[rank]["thread_cpus"]
        start = [line for line in job.lines_of(rank) if f"rank {rank}/2" in line]
        assert f"cores {horovod_env.format_cpu_list(block)} (local rank {rank} of 2 on {n} cores (auto))" in start[0]


def test_metrics_jsonl_has_every_epoch_with_throughput(digits_run):
    _, workdir, _ = digits_run
    records = read_jsonl(workdir / "metrics.jsonl")
    assert [r["epoch"] for r in records] == list(range(1, 16))
    for r in records:
        assert {"loss", "accuracy", "val_loss", "val_accuracy", "lr", "epoch_time_s", "images_per_sec",
                "images_per_sec_per_rank", "step_time_s", "train_time_s"} <= set(r)
        assert r["images_per_sec"] > 0
    # warmup: 2 epochs from 0.05 to 0.1 (scaled by 2 ranks), then cosine towards 0
    assert records[1]["lr"] == pytest.approx(0.1, rel=1e-6)
    assert records[0]["lr"] < 0.1 and records[-1]["lr"] < 0.001


def test_logged_validation_metrics_equal_one_process_on_all_data(digits_run):
    """The averaged metrics are the metrics of the whole validation set, not a mean of per-rank means."""
    _, workdir, reps = digits_run
    last = read_jsonl(workdir / "metrics.jsonl")[-1]
    single = reps[0]["single_process_eval"]
    assert last["val_accuracy"] == pytest.approx(single["accuracy"], abs=1e-6)
    assert last["val_loss"] == pytest.approx(single["loss"], rel=1e-4)


def test_stop_after_epoch_2_then_resume_at_epoch_3_on_both_ranks(tmp_path, digits_two_epochs):
    workdir = digits_two_epochs(tmp_path / "work")  # trained for 2 epochs with these settings
    quick = ["trainer.verbose=0", "checkpoint.keep=0"]
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2]

    # runtime.cpu_binding is the launcher's business: changing it resumes, and none leaves every thread unbound
    job = horovodrun([REPORT, str(tmp_path / "r2"), str(workdir), DIGITS, "trainer.epochs=4", *quick,
                      "runtime.cpu_binding=none"])
    for rank in (0, 1):
        starts = [line for line in job.lines_of(rank) if f"rank {rank}/2" in line]
        assert len(starts) == 1 and "resuming after epoch 2" in starts[0] and "epoch 3 of 4" in starts[0], starts
        assert "unbound (runtime.cpu_binding: none)" in starts[0]
        assert reports(tmp_path / "r2")[rank]["thread_cpus"] == [sorted(os.sched_getaffinity(0))]
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2, 3, 4]
    assert sorted(os.listdir(workdir / "checkpoints")) == ["epoch-0001", "epoch-0002", "epoch-0003", "epoch-0004"]
    with open(workdir / "checkpoints" / "epoch-0004" / "meta.json") as f:
        assert json.load(f)["global_step"] == 4 * 22  # the optimizer's step counter carried on
    assert_identical_weights(reports(tmp_path / "r2"))


def test_checkpoint_that_does_not_fit_fails_every_rank_cleanly(tmp_path, digits_two_epochs):
    workdir = digits_two_epochs(tmp_path / "work")  # the digits CNN's checkpoints
    before = sorted(os.listdir(workdir / "checkpoints"))
    other_model = ["-m", "hvdkeras.train", "--config", DIGITS, "--workdir", str(workdir), "--set", "trainer.epochs=2",
                   "--set", "model.name=mlp"]
    refused = horovodrun(other_model, timeout=180, check=False)  # the config says so before anything loads
    assert refused.returncode != 0
    assert "hvdkeras: error: --workdir" in refused.output and "(model.name: 'small_cnn' -> 'mlp')" in refused.output
    job = horovodrun(other_model + ["--resume=force"], timeout=180, check=False)  # then the checkpoint itself
    assert job.returncode != 0
    errors = [line for line in job.output.splitlines() if "hvdkeras: error:" in line]
    assert errors and "does not fit this model" in errors[0] and "--workdir" in errors[0]
    assert "Traceback" not in job.output.split("Process 0 exit")[0]
    assert sorted(os.listdir(workdir / "checkpoints")) == before  # nothing lost


# The config's check against the world (hvdkeras/config/, without TensorFlow) and the one line: the same on both
# stacks (test_mpi.py checks one under mpirun, on keras3).
@once_per_make_test("the config error under horovodrun", 0.1, stack="keras2")
def test_config_error_under_horovodrun_is_one_line(tmp_path):
    job = horovodrun(["-m", "hvdkeras.train", "--config", DIGITS, "--workdir", str(tmp_path / "w"),
                      "--set", "data.global_batch_size=63"], timeout=120, check=False)
    assert job.returncode != 0
    errors = [line for line in job.output.splitlines() if "hvdkeras: error:" in line]
    assert errors[0].endswith(
        "data.global_batch_size in --set data.global_batch_size=63 must be divisible by the 2 ranks (e.g. 62);"
        " received: 63")
    assert not (tmp_path / "w").exists()


# Fewer than this many wakeups a second of the threads hvd.init starts, on a rank with nothing pending.
# Measured on two ranks of this 2-core machine: about 300 with horovod.idle_wait_ms=50 (the background
# thread 60, Gloo's loop 130, and a third thread 100 either way), 3,000-4,000 with Horovod's own loop,
# which coordinates every 1 ms cycle (its background thread and Gloo's loop 1,650-2,200 each).
QUIET_WAKEUPS_PER_S = 600


@once_per_make_test("the idle-loop test", 0.3, stack="keras2")
def test_an_idle_rank_waits_for_work_and_the_next_allreduce_still_runs():
    """horovod.idle_wait_ms, on by default (patch 0008): while no tensor is pending, Horovod's background
    loop waits for one instead of coordinating every cycle, and an allreduce enqueued after the pause runs
    on both ranks. horovod.idle_wait_ms=0 is Horovod's own loop, measured beside it for the message."""
    script = os.path.join(SCRIPTS, "idle_loop.py")
    waiting = job_results(horovodrun([script, "2"], timeout=180))
    cycling = job_results(horovodrun([script, "2", "horovod.idle_wait_ms=0"], timeout=180))
    assert [r["idle_wait"] for r in waiting + cycling] == ["50", "50", None, None]
    assert all(r["sums"] == [3.0, 3.0] for r in waiting + cycling), waiting + cycling
    wakeups = {"idle_wait_ms=50": [round(r["wakeups_per_s"]) for r in waiting],
               "idle_wait_ms=0": [round(r["wakeups_per_s"]) for r in cycling]}
    assert max(r["wakeups_per_s"] for r in waiting) < QUIET_WAKEUPS_PER_S, f"wakeups per second by rank: {wakeups}"


# Horovod's own settings (environment variables it reads in its C++ core), the same on both stacks.
@once_per_make_test("the Horovod settings test", 0.2, stack="keras3")
def test_horovod_timeline_autotune_and_host_choices_from_the_config(tmp_path):
    import yaml

    workdir = tmp_path / "w"
    horovodrun(["-m", "hvdkeras.train", "--config", DIGITS, "--workdir", str(workdir), "--set", "trainer.epochs=2",
                "--set", "trainer.verbose=0", "--set", "horovod.timeline=timeline.json",
                "--set", "horovod.timeline_mark_cycles=true", "--set", "horovod.autotune=true",
                "--set", "horovod.autotune_log=autotune.csv"])
    with open(workdir / "timeline.json") as f:
        events = json.load(f)  # the whole file parses as JSON
    names = {e.get("name") for e in events}
    assert "ALLREDUCE" in names and "CYCLE_START" in names
    with open(workdir / "autotune.csv") as f:
        assert f.readline().startswith("hierarchical_allreduce,")
    resolved = yaml.safe_load((workdir / "config.yaml").read_text())
    # Horovod's own cycle time and fusion size (null); the thread budget chosen for the host, with its reason
    assert resolved["horovod"]["cycle_time_ms"] is None and resolved["horovod"]["fusion_threshold_mb"] is None
    assert resolved["runtime"]["intra_op_threads"] >= 1 and resolved["runtime"]["inter_op_threads"] >= 1
    assert re.search(r"\n  intra_op_threads: \d+  # \(auto\) cores // ranks on this host = \d+ // 2\n",
                     (workdir / "config.yaml").read_text())
