"""The Spark soak's pieces without Spark: finding a fit's ranks by their environment, the executor a rank runs
under, the flags. The soak on the lab's cluster is its run of record (docs/records/soak-runs.md)."""
import os
import subprocess
import sys
import time

import pytest

from benchmarks.soak import faults, schedule
from benchmarks.soak.attempt import left_behind
from benchmarks.soak.spark_fit import MARK


def _wait_for(find, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.05)
    return find()


def test_a_spark_rank_is_found_by_the_run_in_its_environment_and_left_behind_sees_it_too(tmp_path):
    run = str(tmp_path / "store" / "runs" / "soak")
    env = dict(os.environ, HOROVOD_RANK="1", **{MARK: run})
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        assert _wait_for(lambda: faults.rank_pids(run, MARK)) == {1: proc.pid}
        assert faults.rank_pids(run) == {}  # its command line does not name the run
        assert faults.rank_pids(run + "-other", MARK) == {}
        (line,) = left_behind(run, grace=0.0, env_key=MARK)
        assert line.startswith(f"{proc.pid}: ")  # named, then killed (and reaped by left_behind's wait)
        proc.wait(timeout=10)
        assert faults.rank_pids(run, MARK) == {}
    finally:
        proc.kill()


def test_the_executor_of_a_rank_is_its_nearest_ancestor_running_sparks_executor_backend():
    backend = subprocess.Popen(["bash", "-c", "sleep 30 & wait", faults.EXECUTOR])
    try:
        import psutil

        children = _wait_for(lambda: psutil.Process(backend.pid).children())
        assert faults.executor_of(children[0].pid) == backend.pid
        assert faults.executor_of(backend.pid) is None  # local[N]: no executor process above the rank
    finally:
        backend.kill()
        backend.wait()


def test_a_spark_soak_plans_its_kinds_and_fits_with_the_same_run_id_each_attempt(monkeypatch):
    from benchmarks.soak.__main__ import SHORT_SPARK, parse, spark_command
    from lab import hosts as lab_hosts
    from lab import spark as lab_spark

    monkeypatch.setattr(lab_spark, "can_run", lambda: (True, ""))
    monkeypatch.setattr(lab_hosts, "any_up", lambda: False)
    args = parse(["--spark", "--short"])
    assert args.kinds == list(schedule.SPARK_KINDS) and args.faults == SHORT_SPARK["faults"] == 3
    assert args.deadline >= 150  # a fit's start prints nothing for tens of seconds
    cmd = spark_command(args, "/s", "soak")
    assert cmd[1:3] == ["-m", "benchmarks.soak.spark_fit"] and cmd[cmd.index("--run-id") + 1] == "soak"
    assert cmd[cmd.index("--epochs") + 1] == str(SHORT_SPARK["epochs"])


@pytest.mark.parametrize("argv,said", [
    (["--kinds", "kill_executor"], "kill_executor needs a Spark job: add --spark"),
    (["--spark", "--kinds", "preempt"], "preempt with --spark: choose from kill_rank, kill_executor"),
    (["--spark", "--slurm"], "--spark runs the fit on the lab's Spark cluster"),
])
def test_a_wrong_spark_flag_gets_one_line_saying_what_to_pass(argv, said, capsys, monkeypatch):
    from benchmarks.soak.__main__ import parse
    from lab import slurm as lab_slurm
    from lab import spark as lab_spark

    monkeypatch.setattr(lab_spark, "can_run", lambda: (True, ""))
    monkeypatch.setattr(lab_slurm, "can_run", lambda: (True, ""))
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_a_fault_in_a_fit_whose_lines_come_late_is_placed_and_timed_by_its_metrics():
    # A Spark fit's ranks' lines reach the driver in 64 KB chunks, often when the fit ends: its "resuming after" line
    # came at 199 s, long after the kill at 60 s; the metrics had logged epoch 12 at 59 s, 0.1 s a batch. The retry
    # wrote epoch 13 at 110 s (2.2 s of training): it was back at the fault's batch (12 x 22 + 10) 1.2 s before.
    from benchmarks.soak import accounting
    from benchmarks.soak.output import Said
    from benchmarks.soak.records import TRAINING, Attempt, EpochEnd, Fault

    steps = 22
    attempts = [Attempt(0, 30.0, 81.0, 1, Said(resumed=(10, 0), resumed_at=80.0, steps=steps), expected_next=(12, 0)),
                Attempt(1, 81.0, 200.0, 0, Said(resumed=(12, 0), resumed_at=199.0, steps=steps))]
    fault = Fault(0, schedule.KILL_RANK, 60.0, 0, TRAINING, epoch_logged=12, logged_at=59.0, step_time_s=0.1)
    ends = [EpochEnd(59.0, 12, 2.2),  # before the fault
            EpochEnd(95.0, 12, None),  # the retry's rewrite at its resume, short of the fault's batch
            EpochEnd(110.0, 13, 2.2), EpochEnd(112.2, 14, 2.2)]
    (out,) = accounting.outcomes([fault], attempts, steps, lines_late=True, epoch_ends=ends)
    assert not out.exact and out.position == 12 * steps + 10 and out.held
    assert (out.lost, out.allowed) == (10, 10) and out.wall_lost_s == 48.8  # 110 - 12 x 0.1 - 60
    (unseen,) = accounting.outcomes([fault], attempts, steps, lines_late=True)  # no epoch end after it: not claimed
    assert unseen.wall_lost_s is None
    # the resuming attempt stopped in its start-up (at 100 s); a later one's epoch end would count that stop too
    stopped = [attempts[0], Attempt(1, 81.0, 100.0, 1, Said(resumed=(12, 0), resumed_at=199.0, steps=steps)),
               Attempt(2, 100.0, 200.0, 0, Said(resumed=(12, 0), steps=steps))]
    (early,) = accounting.outcomes([fault], stopped, steps, lines_late=True, epoch_ends=ends)
    assert early.wall_lost_s is None
    # resumed beyond the fault's estimated batch (rank 0 saved at 13:5 alone): back when it resumed, not before
    ahead = [Attempt(0, 30.0, 81.0, 1, Said(resumed=(10, 0), steps=steps), expected_next=(13, 5)),
             Attempt(1, 81.0, 200.0, 0, Said(resumed=(13, 5), resumed_at=199.0, steps=steps))]
    (out,) = accounting.outcomes([fault], ahead, steps, lines_late=True, epoch_ends=ends)
    assert out.lost == 0 and out.wall_lost_s == 50.5  # epoch 14 ended at 112.2, 17 batches past 13:5


def test_the_kind_table_leaves_a_wall_time_it_did_not_measure_blank_not_zero():
    from benchmarks.soak import report
    from benchmarks.soak.records import TRAINING, Fault, Outcome

    kill = Outcome(Fault(0, schedule.KILL_RANK, 60.0, 0, TRAINING), ended_attempt=True, lost=10, wall_lost_s=None)
    went_on = Outcome(Fault(1, schedule.DAMAGE, 90.0, 1, TRAINING), ended_attempt=False, lost=0, wall_lost_s=0.0)
    table = report.by_kind([kill, went_on])
    assert table["kill_rank"]["wall_lost_s"] is None and table["damage_checkpoint"]["wall_lost_s"] == 0.0


def test_a_loop_whose_lines_come_late_notes_each_epoch_end_as_it_appears(tmp_path, fake_soak_job):
    from benchmarks.soak.loop import Loop

    job = fake_soak_job(6, lines_late=True)
    loop = Loop(job, [], (1.0, 2.0), deadline_s=5, logs=str(tmp_path), max_attempts=1, say=lambda line: None,
                tick_s=0.01)
    assert loop.run()
    epochs = [end.epoch for end in loop.epoch_ends]
    assert epochs == sorted(epochs) and epochs[-1] == 6 and len(set(epochs)) >= 3, loop.epoch_ends
    times = [end.at for end in loop.epoch_ends]
    assert times == sorted(times) and 0 < times[0] <= loop.attempts[0].end
