"""benchmarks.soak's pure parts: the fault plan, what an attempt said, the accounting against the promise, the
report; and its one-host faults on plain processes and folders (no TensorFlow, no Horovod)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.soak import accounting, faults, output, report, schedule
from benchmarks.soak.attempt import left_behind
from benchmarks.soak.output import Said
from benchmarks.soak.records import STARTUP, TRAINING, Attempt, Fault
from hvdkeras.common import processes

STEPS = 22


# ------------------------------------------------------------------ the plan


def test_every_kind_comes_once_before_any_comes_twice_and_the_seed_decides_the_plan():
    faults_ = schedule.plan(7, 10, (30, 90))
    kinds = [f.kind for f in faults_]
    assert sorted(kinds[:5]) == sorted(schedule.KINDS) and sorted(kinds[5:]) == sorted(schedule.KINDS)
    assert schedule.plan(7, 10, (30, 90)) == faults_
    assert schedule.plan(8, 10, (30, 90)) != faults_


def test_delays_fall_in_the_interval_or_within_the_start_up_after_a_restart():
    calm = schedule.plan(1, 20, (30, 90), recovery_share=0.0)
    assert all(f.anchor == schedule.PREVIOUS and 30 <= f.delay_s <= 90 for f in calm)
    eager = schedule.plan(1, 20, (30, 90), recovery_share=1.0, startup_s=8)
    assert eager[0].anchor == schedule.PREVIOUS  # the first has no restart to follow
    assert all(f.anchor == schedule.RESTART and 0 <= f.delay_s <= 8 for f in eager[1:])


def test_a_freeze_outlasts_the_stall_limit_and_ends_by_sigcont_or_sigkill():
    freezes = [f for f in schedule.plan(3, 40, (30, 90), stall_limit_s=10) if f.kind == schedule.FREEZE]
    assert len(freezes) == 8
    assert all(15 <= f.freeze_s <= 25 for f in freezes)
    assert {f.freeze_end for f in freezes} == {schedule.THAW, schedule.KILL}
    assert all(f.freeze_s == 0 for f in schedule.plan(3, 40, (30, 90)) if f.kind != schedule.FREEZE)


def test_unknown_kinds_and_bad_ranges_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="unknown fault kinds \\['oom'\\]"):
        schedule.plan(0, 3, (1, 2), kinds=("oom",))
    assert schedule.parse_range("30-90") == (30.0, 90.0)
    assert schedule.parse_range("45") == (45.0, 45.0)
    for bad in ("90-30", "0-5", "a-b", "1-2-3"):
        with pytest.raises(ValueError, match="LOW-HIGH"):
            schedule.parse_range(bad)


def test_a_restart_fault_waits_for_the_next_attempt_and_the_others_give_the_job_their_delay_after_a_restart():
    fault = schedule.PlannedFault(1, schedule.KILL_RANK, schedule.RESTART, 3.0)
    assert schedule.due_at(fault, 100.0, 2, 3, 140.0, (30, 90)) == 143.0  # attempt 3 began at 140 s
    assert schedule.due_at(fault, 100.0, 2, 2, 50.0, (30, 90)) == 190.0  # no restart yet
    calm = schedule.PlannedFault(1, schedule.KILL_RANK, schedule.PREVIOUS, 40.0)
    assert schedule.due_at(calm, 100.0, 2, 3, 140.0, (30, 90)) == 180.0  # 40 s after the restart at 140 s
    assert schedule.due_at(calm, 100.0, 2, 2, 50.0, (30, 90)) == 140.0  # 40 s after the fault the job went on from


# ------------------------------------------------------------------ what an attempt said


def _timed(*lines):
    return [(float(i), line) for i, line in enumerate(lines)]


def test_the_output_gives_the_start_the_preemption_the_damage_the_errors_and_the_final_validation():
    said = output.read(_timed(
        "[1]<stdout>:[hvdkeras] rank 1/2 (local 1/2, CPU): resuming after epoch 3 and batch 7 of epoch 4 from /w/c;"
        " epoch 4 of 40",
        "[0]<stdout>:[hvdkeras] rank 0/2 (local 0/2, CPU): resuming after epoch 5 from /w/c; epoch 6 of 40",
        "[0]<stdout>:[hvdkeras] steps per epoch 22: (auto) as many full global batches as the data holds",
        "[0]<stderr>:[hvdkeras] warning: checkpoint /w/c/epoch-0006 is damaged (ckpt.data has 100 bytes); kept as x",
        "[0]<stderr>:hvdkeras: preempted at epoch 9, batch 12; checkpoint written: /w/c/epoch-0008-batch-0012",
        "[1]<stderr>:hvdkeras: preempted at epoch 9, batch 12; checkpoint written: /w/c/epoch-0008-batch-0012",
        "[0]<stderr>:hvdkeras: error: no space left on /d while writing checkpoint epoch 9; epoch 8 is intact",
        "[1]<stderr>:hvdkeras: error: no space left on /d while writing checkpoint epoch 9; epoch 8 is intact",
        "[0]<stdout>:[hvdkeras] final validation (2 ranks, every example once): val_accuracy=0.9750, val_loss=0.1",
        "Process 1 exit with status code 0.", "Process 0 exit with status code 2."))
    assert said.resumed == (3, 7) and said.resumed_at == 0.0  # the first rank's line
    assert said.preempted == (8, 12)
    assert said.damaged == ["/w/c/epoch-0006"]
    assert said.errors == ["no space left on /d while writing checkpoint epoch 9; epoch 8 is intact"]
    assert said.steps == 22
    assert said.final == {"val_accuracy": 0.975, "val_loss": 0.1}
    assert said.failing_at == 10.0  # the first rank that ended badly, as the launcher reports it


def test_a_fresh_start_and_a_preemption_at_an_epochs_end():
    said = output.read(_timed("rank 0/2 (...): starting fresh; epoch 1 of 40",
                              "hvdkeras: preempted at the end of epoch 4; checkpoint written: /w/c/epoch-0004"))
    assert said.resumed == (0, 0) and said.preempted == (4, 0)
    assert output.checkpoint_position("epoch-0004-batch-0011") == (4, 11)
    assert output.checkpoint_position("damaged-epoch-0004-1") is None


# ------------------------------------------------------------------ the accounting


def _attempt(index, status, resumed=None, resumed_at=None, preempted=None, expected=None, hang=False):
    said = Said(resumed=resumed, resumed_at=resumed_at, preempted=preempted, steps=STEPS)
    return Attempt(index, 0.0, 0.0, status, said, hang=hang, expected_next=expected)


def _fault(kind, at, attempt=0, phase=TRAINING, **kw):
    return Fault(0, kind, at, attempt, phase, **kw)


def test_a_preemption_resumed_at_its_batch_loses_nothing():
    attempts = [_attempt(0, 1, (0, 0), 1.0, preempted=(3, 5), expected=(3, 5)),
                _attempt(1, 0, (3, 5), 30.0)]
    (out,) = accounting.outcomes([_fault(schedule.PREEMPT, 20.0, step_time_s=0.05)], attempts, STEPS)
    assert out.ended_attempt and out.exact and out.held
    assert (out.position, out.resumed, out.promised, out.lost, out.allowed) == (71, 71, 71, 0, 0)
    assert out.wall_lost_s == 10.0


def test_a_kill_loses_the_batches_since_the_newest_checkpoint_and_no_more():
    fault = _fault(schedule.KILL_RANK, 20.0, epoch_logged=4, logged_at=19.0, step_time_s=0.1)
    attempts = [_attempt(0, 1, (0, 0), 1.0, expected=(4, 0)), _attempt(1, 0, (4, 0), 32.0)]
    (out,) = accounting.outcomes([fault], attempts, STEPS)
    assert not out.exact and out.position == 4 * STEPS + 10  # 1 s after epoch 4's line, 0.1 s a step
    assert (out.resumed, out.promised, out.lost, out.allowed) == (88, 88, 10, 10)
    assert out.held and out.wall_lost_s == 13.0  # 12 s to resume, 10 batches again at 0.1 s


def test_a_checkpoint_damaged_while_the_job_restarts_moves_the_promise_of_the_faults_before_it_one_back():
    # The Slurm soak's run of record (seed 4): epoch 123 damaged and a rank killed; two start-ups ended by a kill and
    # a freeze before they restored; then epoch 122 damaged while the job was requeued: the restore set both aside
    # and resumed after epoch 121, which is where every one of the three had to resume, not after 122.
    on_disk = {f"/w/c/epoch-{e:04d}": (e, 0) for e in (121, 122, 123)}
    attempts = [Attempt(3, 165.0, 198.6, 1, Said(resumed=(101, 0), resumed_at=170.0, steps=STEPS),
                        expected_next=(122, 0), checkpoints=on_disk),
                Attempt(4, 201.8, 219.4, 1, Said(steps=STEPS), expected_next=(122, 0), checkpoints=on_disk),
                Attempt(5, 222.5, 282.9, 1, Said(steps=STEPS), expected_next=(122, 0), checkpoints=on_disk),
                Attempt(6, 286.1, 373.4, 0, Said(resumed=(121, 0), resumed_at=300.0, steps=STEPS),
                        expected_next=(600, 0))]
    found = [_fault(schedule.DAMAGE, 194.0, 3, newest_checkpoint=(123, 0), epoch_logged=123, logged_at=193.5,
                    step_time_s=0.02),
             _fault(schedule.KILL_RANK, 214.8, 4, STARTUP), _fault(schedule.FREEZE, 233.9, 5, STARTUP,
                                                                     freeze_s=41.7, freeze_end=schedule.THAW),
             _fault(schedule.DAMAGE, 290.3, 6, STARTUP, newest_checkpoint=(122, 0))]
    outs = accounting.outcomes(found, attempts, STEPS)
    assert [o.held for o in outs] == [True] * 4, [o.note for o in outs]
    assert [o.promised for o in outs[:3]] == [121 * STEPS] * 3
    assert [(o.lost, o.allowed) for o in outs[1:3]] == [(STEPS, STEPS)] * 2  # the epoch the later damage took
    assert accounting.promised_resume(attempts[0], attempts[3], found[:3]) == (122, 0)  # without the late damage


def test_a_checkpoint_damaged_while_the_job_restarts_after_a_preemption_moves_its_promise_back_too():
    # A Slurm soak (seed 40) on a busy machine: the time limit's signal in a start-up left epoch 1's checkpoint as
    # it was (status 75, nothing to save), then that checkpoint was damaged before the requeued job restored: it
    # resumed from the start. The preemption lost nothing of its own; the epoch went with the damage.
    on_disk = {"/w/c/epoch-0001": (1, 0)}
    attempts = [_attempt(0, 1, (0, 0), 1.0, expected=(1, 0)),
                Attempt(1, 16.4, 22.4, 75, Said(steps=STEPS), expected_next=(1, 0), checkpoints=on_disk),
                Attempt(2, 22.4, 54.5, 75, Said(resumed=(0, 0), resumed_at=34.0, steps=STEPS),
                        expected_next=(11, 19))]
    found = [_fault(schedule.KILL_RANK, 9.0, 0, epoch_logged=1, logged_at=8.5, step_time_s=0.07),
             _fault(schedule.PREEMPT, 20.9, 1, STARTUP),
             _fault(schedule.DAMAGE, 32.6, 2, STARTUP, newest_checkpoint=(1, 0))]
    outs = accounting.outcomes(found, attempts, STEPS)
    preempt = outs[1]
    assert (preempt.position, preempt.resumed, preempt.promised) == (STEPS, 0, 0)
    assert (preempt.lost, preempt.allowed) == (STEPS, STEPS) and preempt.held, preempt.note
    # without the damage, the preemption had to lose nothing
    attempts[2].said.resumed = (1, 0)
    (preempt,) = accounting.outcomes(found[1:2], attempts, STEPS)
    assert (preempt.lost, preempt.allowed, preempt.held) == (0, 0, True)


def test_a_rerun_that_resumes_before_the_newest_checkpoint_has_lost_one():
    fault = _fault(schedule.KILL_RANK, 20.0, epoch_logged=4, logged_at=19.0, step_time_s=0.1)
    attempts = [_attempt(0, 1, (0, 0), 1.0, expected=(4, 0)), _attempt(1, 0, (3, 0), 32.0)]
    (out,) = accounting.outcomes([fault], attempts, STEPS)
    assert not out.held and out.lost == 32 and out.allowed == 10
    assert "a checkpoint was lost" in out.note


def test_a_sigterm_in_training_without_a_preemption_line_breaks_the_promise():
    fault = _fault(schedule.PREEMPT, 20.0, epoch_logged=4, logged_at=19.0, step_time_s=0.1)  # epoch 4 ended at 19 s
    attempts = [_attempt(0, 143, (0, 0), 1.0, expected=(4, 0)), _attempt(1, 0, (4, 0), 32.0)]
    (out,) = accounting.outcomes([fault], attempts, STEPS)
    assert not out.held and out.allowed == 0 and out.lost == 10
    assert "no preemption line (status 143): the SIGTERM did not stop the job at a batch" in out.note


def test_a_sigterm_before_an_epoch_of_the_attempt_ended_counts_nothing_lost_and_says_so():
    fault = _fault(schedule.PREEMPT, 20.0, epoch_logged=4, logged_at=0.5, step_time_s=0.1)  # logged before the start
    attempts = [_attempt(0, 143, (4, 0), 1.0, expected=(4, 0)), _attempt(1, 0, (4, 0), 32.0)]
    (out,) = accounting.outcomes([fault], attempts, STEPS)
    assert out.held and out.lost == 0 and not out.exact
    assert "before an epoch of this attempt ended" in out.note


def test_a_fault_at_start_up_loses_nothing_when_the_rerun_resumes_where_the_attempt_would_have():
    attempts = [_attempt(0, 1, (0, 0), 1.0, expected=(4, 0)), _attempt(1, 143, None, None, expected=(4, 0)),
                _attempt(2, 0, (4, 0), 50.0)]
    fault = _fault(schedule.PREEMPT, 35.0, attempt=1, phase=STARTUP)
    out = accounting.outcomes([_fault(schedule.KILL_RANK, 20.0), fault], attempts, STEPS)[1]
    assert out.exact and (out.position, out.lost, out.allowed) == (88, 0, 0) and out.held


def test_a_freeze_the_job_waited_out_costs_its_length_and_a_hang_is_never_survived():
    thawed = _fault(schedule.FREEZE, 10.0, freeze_s=12.0, freeze_end=schedule.THAW, step_time_s=0.1)
    killed = _fault(schedule.KILL_RANK, 40.0, step_time_s=0.1)
    attempts = [_attempt(0, None, (0, 0), 1.0, expected=(0, 0), hang=True), _attempt(1, 0, (0, 0), 200.0)]
    first, second = accounting.outcomes([thawed, killed], attempts, STEPS)
    assert not first.ended_attempt and first.held and first.wall_lost_s == 12.0
    assert second.ended_attempt and second.hang and not second.held and "hung" in second.note


def test_an_attempt_that_failed_with_no_fault_is_the_jobs_own_failure():
    attempts = [_attempt(0, 1, (0, 0), 1.0), _attempt(1, 2, (0, 0), 9.0), _attempt(2, 0, (0, 0), 20.0)]
    assert [a.index for a in accounting.unprompted([_fault(schedule.KILL_RANK, 5.0)], attempts)] == [1]


def test_an_estimated_position_stays_within_the_epoch_the_metrics_had_not_closed():
    fault = _fault(schedule.KILL_RANK, 500.0, epoch_logged=2, logged_at=10.0, step_time_s=0.1)
    attempt = _attempt(0, 1, (0, 0), 1.0)
    assert accounting.position_at(fault, attempt, 0, STEPS) == (2 * STEPS + STEPS - 1, False)


# ------------------------------------------------------------------ the report


def test_the_report_counts_by_kind_and_marks_a_broken_promise():
    fault = _fault(schedule.KILL_RANK, 20.0, epoch_logged=4, logged_at=19.0, step_time_s=0.1)
    attempts = [_attempt(0, 1, (0, 0), 1.0, expected=(4, 0)), _attempt(1, 0, (3, 0), 32.0)]
    outs = accounting.outcomes([fault], attempts, STEPS)
    built = report.build(outs, attempts, {"seed": 0}, STEPS, {"verdict": "trainable weights DIFFER"})
    assert built["by_kind"] == {schedule.KILL_RANK: {"injected": 1, "survived": 0, "batches_lost": 32,
                                                      "wall_lost_s": 15.2, "restarts": 1}}
    assert json.loads(json.dumps(built))["faults"] == 1
    text = report.text(built)
    assert "faults injected: 1; survived (promise held, no hang): 0" in text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("0 kill_rank"))
    assert "~4:10" in row and "3:0" in row and " NO " in row and "a checkpoint was lost" in row
    assert "trainable weights DIFFER" in text


# ------------------------------------------------------------------ the faults, on plain processes and folders


def _checkpoint(root, name, data=b"x" * 1000):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text("{}")
    (folder / "ckpt.data-00000-of-00001").write_bytes(data)
    return folder


def test_damage_truncates_the_newest_and_the_soak_then_expects_the_one_before(tmp_path):
    for name in ("epoch-0001", "epoch-0002", "epoch-0002-batch-0005"):
        _checkpoint(tmp_path, name)
    _checkpoint(tmp_path, "damaged-epoch-0003-1")
    (tmp_path / ".saving-x" / "epoch-0004").mkdir(parents=True)
    assert set(faults.checkpoints(str(tmp_path)).values()) == {(1, 0), (2, 0), (2, 5)}
    damaged = {}
    newest = faults.newest_intact(str(tmp_path), damaged)
    assert newest == (str(tmp_path / "epoch-0002-batch-0005"), (2, 5))
    damaged[newest[0]] = faults.damage(newest[0])
    assert os.path.getsize(damaged[newest[0]]) == faults.DAMAGED_SIZE
    assert faults.newest_intact(str(tmp_path), damaged)[1] == (2, 0)
    # moved aside and saved anew under the same name: the new one counts again
    (tmp_path / "epoch-0002-batch-0005" / "ckpt.data-00000-of-00001").write_bytes(b"y" * 1000)
    assert faults.newest_intact(str(tmp_path), damaged)[1] == (2, 5)


def test_the_ballast_leaves_half_a_checkpoint_of_room():
    assert faults.ballast_bytes(10_000_000, 2_000_000) == 9_000_000
    assert faults.ballast_bytes(10_000_000, 10_000) == 10_000_000 - 64 * 1024  # at least room for a metrics line
    assert faults.ballast_bytes(100, 2_000_000) == 0


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_freeze_stops_the_rank_then_thaws_or_kills_it():
    for end, check in (("cont", lambda p: p.poll() is None and _state(p.pid) != "T"),
                       ("kill", lambda p: p.wait(timeout=5) == -signal.SIGKILL)):
        proc = subprocess.Popen(["sleep", "30"])
        try:
            freeze = faults.Freeze(proc.pid, 0.1, end)
            assert freeze.start()
            time.sleep(0.05)
            assert _state(proc.pid) == "T"
            freeze._thread.join(timeout=5)  # the freeze ends by itself after its 0.1 s
            assert freeze.ended_with == end and check(proc)
            freeze.finish()
        finally:
            proc.kill()
            proc.wait()
    assert not faults.Freeze(2 ** 22 + 1, 0.1, "cont").start()  # no such process


def test_the_ranks_are_found_by_the_workdir_in_their_command_line_and_their_horovod_rank(tmp_path):
    marker = str(tmp_path / "work")
    env = dict(os.environ, HOROVOD_RANK="1")
    launcher = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "import time; time.sleep(30)" {marker} & wait'],
                                env=env)
    try:
        pid = faults.wait_for_rank(marker, 1, 10, lambda: True)
        assert pid is not None and pid != launcher.pid  # the Python process, not its shell
        assert faults.wait_for_rank(marker, 0, 0.1, lambda: True) is None
        assert faults.wait_for_rank(str(tmp_path / "other"), 1, 0.1, lambda: True) is None
        assert faults.signal_rank(pid, signal.SIGKILL)
    finally:
        launcher.kill()
        launcher.wait()


def test_a_link_cut_goes_down_then_up_after_its_time():
    calls = []

    def run(cmd, check):
        calls.append(cmd[-1])
        return subprocess.CompletedProcess(cmd, 0)

    cut = faults.LinkCut("hvdtest0-b", 0.05, run=run)
    assert cut.start() and calls == ["down"]
    cut._thread.join(timeout=5)
    assert calls == ["down", "up"]
    cut.finish()
    assert calls == ["down", "up"]
    refused = faults.LinkCut("nosuch", 0.05, run=lambda cmd, check: subprocess.CompletedProcess(cmd, 1))
    assert not refused.start()


def test_a_process_left_behind_by_the_job_is_named_and_killed(tmp_path):
    marker = str(tmp_path / "work")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker], start_new_session=True)
    try:
        found = left_behind(marker, grace=0.2)
        # Once in a fresh clone's run the scan found nothing: say whether the stand-in was still there then
        assert len(found) == 1 and found[0].startswith(f"{proc.pid}: ") and found[0].endswith(marker), (
            found, proc.pid, proc.poll())
        assert not processes.alive(proc.pid)  # killed (and reaped by the kill's wait)
        assert left_behind(marker, grace=0.2) == []
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ the command line


def test_short_fills_in_the_suites_settings_and_the_users_flags_win():
    from benchmarks.soak.__main__ import SHORT, command, parse

    args = parse(["--short", "--kinds", "kill_rank,preempt", "--epochs", "12"])
    assert (args.faults, args.deadline, args.gloo_timeout) == (SHORT["faults"], SHORT["deadline"],
                                                               SHORT["gloo_timeout"])
    assert args.faults >= 5 and args.epochs == 12 and args.kinds == ["kill_rank", "preempt"]
    cmd = command(args, "/w")
    assert cmd[cmd.index("--gloo-timeout-seconds") + 1] == str(SHORT["gloo_timeout"])
    assert cmd[cmd.index("--workdir") + 1] == "/w" and "trainer.epochs=12" in cmd and "model.dropout=0" in cmd


@pytest.mark.parametrize("argv,said", [
    (["--interval", "90-30"], "--interval: a range of seconds is LOW-HIGH"),
    (["--kinds", "kill_rank,oom"], "--kinds: unknown ['oom']"),
    (["--faults", "0"], "--faults and --epochs must be at least 1"),
])
def test_a_wrong_flag_gets_one_line_saying_what_to_pass(argv, said, capsys):
    from benchmarks.soak.__main__ import parse

    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_the_full_disk_fault_without_root_says_how_to_leave_it_out(monkeypatch, capsys):
    from benchmarks.soak.__main__ import parse

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit):
        parse([])
    err = capsys.readouterr().err
    assert "the full_disk fault needs root" in err
    assert "--kinds kill_rank,preempt,freeze,damage_checkpoint" in err
    assert parse(["--kinds", "kill_rank"]).kinds == ["kill_rank"]  # without it, no root needed


# ------------------------------------------------------------------ the loop, on a stand-in job


def test_the_loop_reruns_the_job_after_each_fault_until_it_finishes_and_the_promise_holds(tmp_path, fake_soak_job):
    from benchmarks.soak.loop import Loop

    # 12 epochs (0.6 s): the preemption 0.12 s after the restart lands before the rerun ends, however far the
    # first attempt got (with 4, a rerun that had 1 or 2 epochs left could end first on a busy machine: [1, 0])
    job = fake_soak_job(12)
    plan = [schedule.PlannedFault(0, schedule.KILL_RANK, schedule.PREVIOUS, 0.15, rank=1),
            schedule.PlannedFault(1, schedule.PREEMPT, schedule.RESTART, 0.12)]
    # The preemption is due 0.12 s into the restart; only a restart that is not coming would make it due 4 s after
    # the kill instead (the interval's longest). With 0.2 s there, a busy machine's job that took longer than that
    # to see its dead rank got the preemption too, in the first attempt ([-15, 0]).
    loop = Loop(job, plan, (0.1, 4.0), deadline_s=5, logs=str(tmp_path), max_attempts=4, say=lambda line: None,
                tick_s=0.02)
    assert loop.run()
    statuses = [a.status for a in loop.attempts]
    assert statuses in ([1, 75, 0], [1, -signal.SIGTERM, 0]), statuses  # -15: the SIGTERM beat the job's handler
    assert [f.kind for f in loop.faults] == [schedule.KILL_RANK, schedule.PREEMPT]
    assert loop.faults[0].detail.startswith("SIGKILL to rank 1 (pid ")
    outs = accounting.outcomes(loop.faults, loop.attempts, 4)
    assert all(out.ended_attempt and out.held for out in outs), outs
    resumed = [a.said.resumed for a in loop.attempts[1:] if a.said.resumed is not None][0]
    assert resumed == (loop.attempts[0].expected_next or (0, 0))  # at the newest checkpoint
    assert loop.attempts[-1].said.final == {"val_accuracy": 0.5}
    assert not [a.left_behind for a in loop.attempts if a.left_behind]


def test_a_fault_still_due_near_the_jobs_end_fires_before_the_job_ends(tmp_path, fake_soak_job):
    # The suite's soak once ended after 4 of its 5 faults: the plan's delays are seconds, and a fast machine trained
    # the job to its end 0.05 s before the last one was due. Due 30 s after the previous here, it must come anyway.
    from benchmarks.soak.loop import Loop

    job = fake_soak_job(40)
    plan = [schedule.PlannedFault(0, schedule.KILL_RANK, schedule.PREVIOUS, 30.0, rank=1)]
    loop = Loop(job, plan, (30.0, 30.0), deadline_s=5, logs=str(tmp_path), max_attempts=3, say=lambda line: None,
                tick_s=0.02, epochs=40, end_margin=20)
    assert loop.run()
    assert [f.kind for f in loop.faults] == [schedule.KILL_RANK] and loop.faults[0].injected
    assert "(early, " in loop.faults[0].detail and " of 40 logged)" in loop.faults[0].detail, loop.faults[0].detail
    assert loop.faults[0].epoch_logged >= 20
    assert [a.status for a in loop.attempts] == [1, 0]  # the kill ended the first attempt; the rerun finished
    assert loop.clock() < 25  # not the 30 s the plan said


def test_a_fault_due_as_its_attempt_went_down_hits_the_next_attempt(tmp_path):
    # The Slurm soak once drew a damage while a preempted run was stopping, with no checkpoint yet: rank 0 was gone,
    # so the damage's kill found nothing, and the fault counted as not injected. It belongs to the next attempt.
    from benchmarks.soak.loop import Job, Loop

    rank = subprocess.Popen(["sleep", "60"])  # attempt 1's rank 0

    class Run:
        def __init__(self, index, clock):
            self.index, self.clock, self.started, self.lines, self.name = index, clock, clock(), [], f"run {index}"

        def running(self):
            if self.index == 0:
                return self.clock() < self.started + 2.0  # ends before the fault, due at 0.3 s, finds its rank
            return self.index == 1 and rank.poll() is None

        def finish(self):
            return 0 if self.index == 2 else 1

        def kill(self):
            pass

    class Attempts(Job):
        def start(self, log_path, clock):
            return Run(len(loop.attempts), clock)

    class Ranks(Loop):
        def _rank_pids(self, marker):
            return {0: rank.pid} if len(self.attempts) == 1 else {}

    said = []
    workdir = tmp_path / "w"
    plan = [schedule.PlannedFault(0, schedule.DAMAGE, schedule.PREVIOUS, 0.3, rank=0)]
    loop = Ranks(Attempts(["true"], {}, str(tmp_path), str(workdir)), plan, (0.1, 1.0), deadline_s=30,
                 logs=str(tmp_path), max_attempts=3, say=said.append, tick_s=0.02)
    try:
        assert loop.run()
    finally:
        rank.kill()
    assert [a.status for a in loop.attempts] == [1, 1, 0]
    assert len(loop.faults) == 1 and loop.faults[0].injected and loop.faults[0].attempt == 1, loop.faults
    assert loop.faults[0].detail == f"no checkpoint yet; SIGKILL to rank 0 (pid {rank.pid})"
    assert rank.wait(timeout=10) == -signal.SIGKILL
    assert any("the attempt ended before it was hit (no checkpoint yet; rank 0 not found); it goes to the next"
               in line for line in said), said


def test_a_checkpoint_gone_without_being_pruned_or_set_aside_is_lost():
    def ended(index, names, damaged=()):
        attempt = _attempt(index, 1)
        attempt.checkpoints = {f"/c/{n}": output.checkpoint_position(n) for n in names}
        attempt.said.damaged = list(damaged)
        return attempt

    attempts = [ended(0, ["epoch-0001", "epoch-0002", "epoch-0003"]),
                ended(1, ["epoch-0002", "epoch-0003", "epoch-0004"]),  # 1 pruned: 3 newer exist
                ended(2, ["epoch-0002", "epoch-0004"], damaged=["/c/epoch-0003"]),  # 3 set aside as damaged
                ended(3, ["epoch-0004"])]  # 2 gone with one newer only
    assert accounting.lost_checkpoints(attempts, keep=3) == ["/c/epoch-0002 (after attempt 2, gone after attempt 3)"]
    assert len(accounting.lost_checkpoints(attempts, keep=0)) == 2  # keep all: a pruned one is lost too


def test_the_link_cut_needs_the_labs_hosts_and_the_lab_says_why_it_cannot_run(monkeypatch, capsys):
    from benchmarks.soak.__main__ import parse
    from lab import hosts as lab_hosts

    with pytest.raises(SystemExit):
        parse(["--kinds", "link_cut"])
    assert "link_cut needs the lab's two hosts: add --hosts 2" in capsys.readouterr().err
    monkeypatch.setattr(lab_hosts, "can_run", lambda: (False, "'ip' not found: install iproute2"))
    with pytest.raises(SystemExit):
        parse(["--hosts", "2"])
    assert "--hosts 2: the lab cannot run here: 'ip' not found: install iproute2" in capsys.readouterr().err
    monkeypatch.setattr(lab_hosts, "can_run", lambda: (True, ""))
    exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p.startswith("/run/netns/hvdtest") or exists(p))
    with pytest.raises(SystemExit):
        parse(["--hosts", "2"])
    assert "the lab's hosts are up already, maybe for another job" in capsys.readouterr().err
    monkeypatch.setattr(os.path, "exists", lambda p: not p.startswith("/run/netns/hvdtest") and exists(p))
    assert parse(["--hosts", "2"]).kinds[-1] == "link_cut"  # the two-host kinds join the default


def test_on_the_labs_hosts_the_job_runs_one_rank_on_each():
    from benchmarks.soak.__main__ import command, parse
    from lab import hosts as lab_hosts

    hosts = [lab_hosts.Host("a", "na", "198.18.213.2"), lab_hosts.Host("b", "nb", "198.18.213.3")]
    lab = lab_hosts.HostsInfo("/t", hosts, identity_file="/t/id_ed25519")
    cmd = command(parse(["--kinds", "kill_rank"]), "/w", lab)
    assert cmd[cmd.index("-H") + 1] == "198.18.213.2:1,198.18.213.3:1" and "--network-interfaces" in cmd
    assert "localhost:2" not in cmd


def test_a_fault_that_found_nothing_to_hit_is_not_blamed_for_the_end_of_its_attempt():
    preempt = _fault(schedule.PREEMPT, 19.5, phase=STARTUP)
    missed = _fault(schedule.KILL_RANK, 29.9, phase=STARTUP, detail="rank 0 not found", injected=False)
    attempts = [_attempt(0, 1, None, None, expected=None), _attempt(1, 0, (0, 0), 45.0)]
    first, second = accounting.outcomes([preempt, missed], attempts, STEPS)
    assert first.ended_attempt and first.held and first.wall_lost_s == 25.5
    assert not second.ended_attempt and second.note == "not injected"
    built = report.build([first, second], attempts, {}, STEPS)
    assert built["faults"] == 1 and built["not_injected"] == 1 and built["by_kind"].keys() == {schedule.PREEMPT}
    assert "faults injected: 1 (1 more due found nothing to hit)" in report.text(built)


def test_a_fault_that_came_after_a_rank_had_ended_badly_did_not_end_the_attempt():
    freeze = _fault(schedule.FREEZE, 21.1, freeze_s=22.4, freeze_end=schedule.KILL, epoch_logged=1, logged_at=21.0,
                    step_time_s=0.06)
    preempt = _fault(schedule.PREEMPT, 40.8, epoch_logged=1, logged_at=21.0, step_time_s=0.06)
    attempts = [_attempt(0, 1, (0, 0), 16.0, expected=(1, 0)), _attempt(1, 0, (1, 0), 55.0)]
    attempts[0].said.failing_at = 31.4  # the frozen rank's partner gave up after Gloo's timeout
    first, second = accounting.outcomes([freeze, preempt], attempts, STEPS)
    assert first.ended_attempt and first.held and first.resumed == 22
    assert not second.ended_attempt and second.held and "already ending (a rank exited at 31.4s)" in second.note


def test_a_sigterm_while_a_rank_is_frozen_may_lose_what_a_kill_loses_and_no_more():
    frozen = _fault(schedule.FREEZE, 18.0, freeze_s=40.0, freeze_end=schedule.KILL, step_time_s=0.1)
    fault = _fault(schedule.PREEMPT, 20.0, epoch_logged=4, logged_at=19.0, step_time_s=0.1)
    attempts = [_attempt(0, 1, (0, 0), 1.0, expected=(4, 0)), _attempt(1, 0, (4, 0), 45.0)]
    out = accounting.outcomes([frozen, fault], attempts, STEPS)[1]
    assert out.held and out.allowed == out.lost == 10 and "a rank was frozen" in out.note
    thawed = _fault(schedule.FREEZE, 5.0, freeze_s=10.0, freeze_end=schedule.THAW)  # went on before the SIGTERM
    assert not accounting.outcomes([thawed, fault], attempts, STEPS)[1].held


def test_the_report_names_the_stacks_tensorflow_whichever_package_installed_it(monkeypatch):
    from importlib import metadata

    from benchmarks.soak import __main__ as soak_main

    installed = {"tensorflow-cpu": "2.21.0", "keras": "3.10.0", "horovod": "0.28.1"}

    def version(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(metadata, "version", version)
    assert soak_main._stack() == "tensorflow 2.21.0, keras 3.10.0, horovod 0.28.1"
    installed["tensorflow"] = installed.pop("tensorflow-cpu")
    del installed["horovod"]
    assert soak_main._stack() == "tensorflow 2.21.0, keras 3.10.0"
