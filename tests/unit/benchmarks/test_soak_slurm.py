"""The soak's Slurm job (benchmarks/soak/slurm_job.py) and its flags and accounting, without a cluster: Slurm's
clients are a stand-in that answers as ``scontrol``, ``sbatch`` and ``scancel`` do. The soak on the lab's real
cluster is tests/distributed/test_slurm.py's."""
import subprocess
import time

import pytest

from benchmarks.soak import accounting, schedule, slurm_job
from benchmarks.soak.output import Said
from benchmarks.soak.records import STARTUP, TRAINING, Attempt, Fault

STEPS = 22


class FakeSlurm:
    """Answers Slurm's clients from ``state`` (a dict the test changes) and notes every call."""

    def __init__(self, **state):
        self.state = {"JobState": "PENDING", "Restarts": "0", "Reason": "None", "ExitCode": "0:0", **state}
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        out, code = "", 0
        if argv[0] == "sbatch":
            out = "7\n"
        elif argv[:3] == ["scontrol", "show", "job"]:
            out = " ".join(f"{k}={v}" for k, v in self.state.items()) + "\n"
        elif argv[:2] == ["scontrol", "requeue"]:
            self.state.update(JobState="PENDING", Reason="BeginTime",
                              Restarts=str(int(self.state["Restarts"]) + 1))
        elif argv[:2] == ["scontrol", "update"] and argv[2].startswith("JobId="):
            self.state.update(Reason="None")
        return subprocess.CompletedProcess(argv, code, out, "")


def _job(tmp_path, fake, hold_s=2.0):
    return slurm_job.SlurmJob(str(tmp_path / "job.sbatch"), str(tmp_path / "job.out"), {}, str(tmp_path),
                              ["hvd-host-a", "hvd-host-b"], hold_s=hold_s, run=fake, settle_s=0.1, tail_s=0.1)


def test_scontrols_line_becomes_the_jobs_state():
    line = "JobId=7 JobName=hvdkeras-digits JobState=PENDING Reason=BeginTime Restarts=2 ExitCode=0:0"
    job = slurm_job.parse_job(line)
    assert (job["JobState"], job["Reason"], job["Restarts"]) == ("PENDING", "BeginTime", "2")


@pytest.mark.parametrize("state,status", [
    ({"JobState": "RUNNING", "Restarts": "1"}, None),  # the run goes on
    ({"JobState": "PENDING", "Restarts": "1"}, None),  # its own start, after a requeue
    ({"JobState": "PENDING", "Restarts": "2"}, slurm_job.REQUEUED_STATUS),  # requeued: by its script or a node
    ({"JobState": "COMPLETED", "Restarts": "1", "ExitCode": "0:0"}, 0),
    ({"JobState": "FAILED", "Restarts": "1", "ExitCode": "1:0"}, 1),
    ({"JobState": "FAILED", "Restarts": "1", "ExitCode": "0:10"}, 138),  # the batch shell ended by SIGUSR1
    ({"JobState": "CANCELLED", "Restarts": "1", "ExitCode": "0:0"}, 1),
])
def test_a_runs_status_is_its_requeue_its_completion_or_its_exit_code(state, status):
    assert slurm_job.run_status(state, restarts=1) == status


def test_the_first_attempt_submits_and_a_failed_run_is_requeued_and_released_after_the_hold(tmp_path):
    fake = FakeSlurm()
    job = _job(tmp_path, fake)
    run = job.run(str(tmp_path / "attempt-0.log"), time.monotonic)
    assert job.job_id == "7" and fake.calls[0][:2] == ["sbatch", "--parsable"] and run.running()
    assert run.name == "Slurm job 7, run 0"
    fake.state.update(JobState="FAILED", ExitCode="1:0")  # a rank was killed
    assert run.finish() == 1
    started = time.monotonic()
    again = job.run(str(tmp_path / "attempt-1.log"), time.monotonic)
    assert ["scontrol", "requeue", "7"] in fake.calls and again.restarts == 1 and again.running()
    while not any(c[:2] == ["scontrol", "update"] for c in fake.calls) and time.monotonic() - started < 10:
        time.sleep(0.05)
    (update,) = [c for c in fake.calls if c[:2] == ["scontrol", "update"]]
    assert update[2:] == ["JobId=7", "StartTime=now+1"] and time.monotonic() - started >= 2.0  # not before hold_s
    fake.state.update(JobState="COMPLETED")
    assert again.finish() == 0


def test_a_run_the_script_requeued_is_not_requeued_again(tmp_path):
    fake = FakeSlurm(JobState="RUNNING")
    job = _job(tmp_path, fake)
    run = job.run(str(tmp_path / "attempt-0.log"), time.monotonic)
    fake.state.update(JobState="PENDING", Reason="BeginTime", Restarts="1")  # scontrol requeue, by the script
    assert not run.running() and run.finish() == slurm_job.REQUEUED_STATUS
    again = job.run(str(tmp_path / "attempt-1.log"), time.monotonic)
    assert again.restarts == 1 and not any(c[:2] == ["scontrol", "requeue"] for c in fake.calls)
    again._done.set()


def test_the_time_limits_signal_goes_to_the_batch_shell_of_a_running_job_only(tmp_path, monkeypatch):
    # no batch shell runs here: the signal goes once the wait for one ends, shortened here
    monkeypatch.setattr(slurm_job, "SCRIPT_WAIT_S", 0.2)
    fake = FakeSlurm(JobState="PENDING")
    job = _job(tmp_path, fake)
    run = job.run(str(tmp_path / "attempt-0.log"), time.monotonic)
    assert not run.preempt()  # a scheduler signals no pending job
    fake.state.update(JobState="RUNNING")
    run._state = (0.0, {})
    assert run.wait_started(1.0) and run.preempt()
    assert fake.calls[-1] == ["scancel", "--batch", "--signal=USR1", "7"]
    run._done.set()


def test_the_runs_lines_are_its_part_of_the_jobs_appended_output(tmp_path):
    out = tmp_path / "job.out"
    out.write_text("the run before\n")
    fake = FakeSlurm(JobState="RUNNING")
    job = _job(tmp_path, fake)
    job.job_id = "7"
    run = slurm_job.SlurmRun(job, str(tmp_path / "attempt.log"), time.monotonic, restarts=0, requeued_at=None)
    with open(out, "a") as f:
        f.write("[0]<stdout>:[hvdkeras] rank 0/2 (local 0/1, ...)\n[0]<stdout>:resuming after")
    fake.state.update(JobState="COMPLETED")
    run._state = (0.0, {})
    assert run.finish() == 0
    assert [line for _, line in run.lines] == ["[0]<stdout>:[hvdkeras] rank 0/2 (local 0/1, ...)",
                                               "[0]<stdout>:resuming after"]
    assert "the run before" not in (tmp_path / "attempt.log").read_text()


def test_a_node_fails_down_stays_drained_and_resumes_after_its_time(tmp_path):
    fake = FakeSlurm()
    node = _job(tmp_path, fake).node_fail(1, 0.2)
    assert node.node == "hvd-host-b" and node.start()
    time.sleep(0.5)
    node.finish()
    states = [c[3] for c in fake.calls if c[:2] == ["scontrol", "update"]]
    assert states == ["State=DOWN", "State=DRAIN", "State=RESUME"]


def test_a_node_fault_lands_in_the_plan_with_its_time_out():
    plan = schedule.plan(40, 4, (8, 12), schedule.SLURM_KINDS, 0.3, 8.0, 30, leave_s=15)
    assert {f.kind for f in plan} == set(schedule.SLURM_KINDS)
    (node,) = [f for f in plan if f.kind == schedule.NODE_FAIL]
    assert node.leave_s == 15 and node.anchor == schedule.RESTART  # seed 40: while the job is requeued


def test_a_node_failure_while_the_job_is_requeued_costs_the_wait_and_no_batch():
    said = Said(resumed=(2, 0), resumed_at=70.0, steps=STEPS)
    attempts = [Attempt(0, 0.0, 41.0, 1, Said(resumed=(0, 0), resumed_at=5.0, steps=STEPS), expected_next=(2, 0)),
                Attempt(1, 41.0, 120.0, 0, said)]
    fault = Fault(0, schedule.NODE_FAIL, 42.6, 1, STARTUP, back_at=57.6)
    (out,) = accounting.outcomes([fault], attempts, STEPS)
    assert out.held and not out.ended_attempt and out.wall_lost_s == 15.0
    assert out.note == "the requeued job waited for the node"


def test_a_node_failure_of_a_running_job_is_judged_at_the_batch_its_sigterm_stopped_it():
    attempts = [Attempt(0, 0.0, 11.0, slurm_job.REQUEUED_STATUS,
                        Said(resumed=(0, 0), resumed_at=5.0, preempted=(5, 21), steps=STEPS), expected_next=(5, 21)),
                Attempt(1, 11.0, 60.0, 0, Said(resumed=(5, 21), resumed_at=30.0, steps=STEPS))]
    (out,) = accounting.outcomes([Fault(0, schedule.NODE_FAIL, 9.2, 0, TRAINING)], attempts, STEPS)
    assert out.exact and out.held and (out.position, out.resumed, out.lost) == (5 * STEPS + 21,) * 2 + (0,)


@pytest.mark.parametrize("argv,said", [
    (["--kinds", "node_fail"], "node_fail needs a Slurm job: add --slurm"),
    (["--slurm", "--kinds", "full_disk"], "full_disk with --slurm: choose from preempt, kill_rank"),
    (["--slurm", "--elastic"], "--slurm runs the job on the lab's Slurm cluster"),
    (["--slurm", "--gloo-timeout", "10"], "the generated script's horovodrun waits 30 s"),
    (["--slurm-cluster", "/nonexistent/cluster.json"], "--slurm-cluster: no such file"),
])
def test_a_wrong_slurm_flag_gets_one_line_saying_what_to_pass(argv, said, capsys, monkeypatch):
    from benchmarks.soak.__main__ import parse
    from lab import slurm as lab_slurm

    monkeypatch.setattr(lab_slurm, "can_run", lambda: (True, ""))
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_slurm_short_has_one_fault_of_each_slurm_kind_and_the_scripts_gloo_timeout(monkeypatch):
    from benchmarks.soak.__main__ import SLURM_GLOO_TIMEOUT, parse
    from lab import hosts as lab_hosts
    from lab import slurm as lab_slurm

    monkeypatch.setattr(lab_slurm, "can_run", lambda: (True, ""))
    monkeypatch.setattr(lab_hosts, "any_up", lambda: False)
    args = parse(["--slurm", "--short"])
    assert args.kinds == list(schedule.SLURM_KINDS) and args.faults == len(schedule.SLURM_KINDS)
    assert args.gloo_timeout == SLURM_GLOO_TIMEOUT and args.slurm
