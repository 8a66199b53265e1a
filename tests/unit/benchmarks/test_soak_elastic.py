"""benchmarks.soak's elastic mode: the host_leave fault's plan and hosts file, the workers' current ranks, the worlds
an elastic job's output announces, and the accounting of a fault the job goes on through (no processes, no
TensorFlow, no Horovod)."""
import copy
import dataclasses
import os
import threading

import pytest

from benchmarks.soak import accounting, elastic, faults, output, report, schedule
from benchmarks.soak.loop import Job, Loop
from benchmarks.soak.output import Said, World
from benchmarks.soak.records import TRAINING, Attempt, Fault

STEPS = 22
BATCH2, BATCH1 = "(global batch 64 = 2 x 32, lr 0.1)", "(global batch 64 = 1 x 64, lr 0.1)"  # the driver's words
PROMISE = elastic.Promise(full_size=2, commit_every=5, rejoin_limit_s=60.0, cooldown_s=10.0)


# ------------------------------------------------------------------ the plan


def test_elastic_kinds_come_in_rounds_and_a_host_leave_takes_rank_1s_host_for_its_time():
    plan = schedule.plan(4, 9, (30, 90), schedule.ELASTIC_KINDS, leave_s=17.0)
    kinds = [f.kind for f in plan]
    assert all(sorted(kinds[i:i + 3]) == sorted(schedule.ELASTIC_KINDS) for i in (0, 3, 6))
    leaves = [f for f in plan if f.kind == schedule.HOST_LEAVE]
    assert len(leaves) == 3 and all(f.rank == 1 and f.leave_s == 17.0 for f in leaves)
    assert all(f.leave_s == 0.0 for f in plan if f.kind != schedule.HOST_LEAVE)
    assert 0 in {f.rank for f in plan if f.kind == schedule.KILL_RANK} | {f.rank for f in schedule.plan(
        5, 30, (30, 90), schedule.ELASTIC_KINDS) if f.kind == schedule.KILL_RANK}  # a kill may hit rank 0


# ------------------------------------------------------------------ the hosts file and the ranks


def test_a_host_leaves_the_hosts_file_and_is_written_back_after_its_time(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n# the other one\n127.0.0.1:1\n")
    leave = faults.HostLeave(str(hosts), "127.0.0.1", 0.3)
    assert leave.start()
    assert hosts.read_text() == "localhost:1\n# the other one\n"
    leave._thread.join(timeout=5)
    assert hosts.read_text() == "localhost:1\n# the other one\n127.0.0.1:1\n"
    assert not os.path.exists(f"{hosts}.soak-tmp")


def test_a_host_leave_ends_early_when_the_attempt_ends_and_a_host_not_in_the_file_is_not_hit(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n127.0.0.1:1\n")
    leave = faults.HostLeave(str(hosts), "localhost", 3600)
    assert leave.start() and hosts.read_text() == "127.0.0.1:1\n"
    leave.finish()  # not an hour: at once
    assert hosts.read_text() == "localhost:1\n127.0.0.1:1\n"
    assert not faults.HostLeave(str(hosts), "elsewhere", 1).start()
    assert faults.without_host("a\nb:2\nab:1\n", "a") == "b:2\nab:1\n"


def test_workers_rank_by_the_world_they_were_started_in_then_by_the_rank_they_were_started_as():
    # started together: 127.0.0.1 as rank 0 (Horovod's order of a set), localhost as rank 1
    first = [(11, "localhost", 1, 100.0), (10, "127.0.0.1", 0, 100.4)]
    assert faults.order_workers(first) == [(10, "127.0.0.1"), (11, "localhost")]
    # 127.0.0.1 left, and came back 40 s later: started as rank 1, it is rank 1; the survivor, started as 1, is 0
    assert faults.order_workers([(11, "localhost", 1, 100.0), (12, "127.0.0.1", 1, 140.0)]) == [
        (11, "localhost"), (12, "127.0.0.1")]
    assert faults.order_workers([(12, "127.0.0.1", 1, 140.0)]) == [(12, "127.0.0.1")]


# ------------------------------------------------------------------ what the output says


def test_an_elastic_jobs_worlds_come_from_rank_0s_lines_and_a_workers_exit_does_not_end_it():
    said = output.read([
        (1.0, "[1]<stdout>:[hvdkeras] rank 1/2: elastic starting at epoch 1, batch 0 " + BATCH2),
        (1.1, "[0]<stdout>:[hvdkeras] rank 0/2: elastic starting at epoch 1, batch 0 " + BATCH2),
        (5.0, "[0]<stdout>:22/22 - 2s - 75ms/step - accuracy: 1.0000 - loss: 2.4e-04"),
        (9.0, "Process 0 exit with status code 134."),
        (12.0, "[1]<stdout>:[hvdkeras] rank 0/1: elastic resuming at epoch 15, batch 5 " + BATCH1),
        (40.0, "[1]<stdout>:[hvdkeras] rank 0/2: elastic resuming at epoch 29, batch 20 " + BATCH2),
        (40.1, "[1]<stdout>:[hvdkeras] rank 1/2: elastic resuming at epoch 29, batch 20 " + BATCH2),
    ], elastic=True)
    assert said.worlds == [World(1.1, 2, (0, 0)), World(12.0, 1, (14, 5)), World(40.0, 2, (28, 20))]
    assert (said.resumed, said.resumed_at, said.steps, said.failing_at) == ((0, 0), 1.1, 22, None)
    plain = output.read([(9.0, "Process 0 exit with status code 134."),
                         (12.0, "rank 0/1: elastic resuming at epoch 15, batch 5 (x)")])
    assert plain.worlds == [] and plain.failing_at == 9.0


# ------------------------------------------------------------------ the accounting


def _attempt(index, status, worlds, end=100.0):
    said = Said(resumed=worlds[0].position, resumed_at=worlds[0].at, steps=STEPS, worlds=list(worlds))
    return Attempt(index, 0.0, end, status, said)


def _leave(at=20.0, back=35.0, **kw):
    kw.setdefault("epoch_logged", 8)
    kw.setdefault("logged_at", at - 0.5)
    kw.setdefault("step_time_s", 0.1)
    return Fault(0, schedule.HOST_LEAVE, at, 0, TRAINING, back_at=back, **kw)


def test_a_host_that_leaves_and_rejoins_in_time_holds_the_promise_without_a_restart():
    attempts = [_attempt(0, 0, [World(1.0, 2, (0, 0)), World(23.0, 1, (9, 5)), World(50.0, 2, (16, 0))])]
    (out,) = accounting.outcomes([_leave()], attempts, STEPS, PROMISE)
    assert out.held and not out.ended_attempt and out.rejoined_s == 15.0
    assert out.position == 8 * STEPS + 5 and not out.exact  # 0.5 s after epoch 8's line at 0.1 s a step
    assert (out.resumed, out.promised, out.lost, out.allowed) == (9 * STEPS + 5, 8 * STEPS, 0, 5)
    assert out.wall_lost_s == 0.8  # 3 s to the smaller world, less the 22 batches it trained past the fault
    assert "2->1 ranks 3.0s after it" in out.note and "->2 ranks 15s after the host was back" in out.note
    row = report.by_kind([out])[schedule.HOST_LEAVE]
    assert (row["injected"], row["survived"], row["restarts"]) == (1, 1, 0)


def test_a_host_that_never_comes_back_or_comes_back_too_late_breaks_the_promise():
    never = [_attempt(0, 0, [World(1.0, 2, (0, 0)), World(23.0, 1, (9, 5))])]
    (out,) = accounting.outcomes([_leave()], never, STEPS, PROMISE)
    assert not out.held and "never back to 2 ranks (the job finished first: raise --epochs)" in out.note
    late = [_attempt(0, 0, [World(1.0, 2, (0, 0)), World(23.0, 1, (9, 5)), World(96.0, 2, (40, 0))])]
    (out,) = accounting.outcomes([_leave()], late, STEPS, PROMISE)
    assert not out.held and out.rejoined_s == 61.0 and "later than the 60s promised" in out.note


def test_a_job_that_ends_instead_of_going_on_or_rolls_back_past_an_epoch_end_breaks_the_promise():
    ended = [_attempt(0, 1, [World(1.0, 2, (0, 0))]), _attempt(1, 0, [World(60.0, 2, (8, 0))])]
    (out,) = accounting.outcomes([_leave()], ended, STEPS, PROMISE)
    assert not out.held and out.ended_attempt and "the job ended (status 1) instead of going on" in out.note
    assert report.by_kind([out])[schedule.HOST_LEAVE]["restarts"] == 1
    back = [_attempt(0, 0, [World(1.0, 2, (0, 0)), World(23.0, 1, (7, 10)), World(50.0, 2, (16, 0))])]
    (out,) = accounting.outcomes([_leave()], back, STEPS, PROMISE)
    assert not out.held and "rolled back past the last epoch end logged" in out.note


def test_a_killed_worker_rolls_back_to_its_last_commit_and_its_host_counts_as_back_after_the_cooldown():
    kill = Fault(0, schedule.KILL_RANK, 20.0, 0, TRAINING, epoch_logged=8, logged_at=19.0, step_time_s=0.1,
                 back_at=30.0)
    attempts = [_attempt(0, 0, [World(1.0, 2, (0, 0)), World(22.0, 1, (8, 5)), World(52.0, 2, (20, 0))])]
    (out,) = accounting.outcomes([kill], attempts, STEPS, PROMISE)
    assert out.held and not out.ended_attempt and out.rejoined_s == 22.0
    assert (out.position, out.resumed, out.lost, out.allowed) == (8 * STEPS + 10, 8 * STEPS + 5, 5, 5)
    assert out.wall_lost_s == 2.5  # 2 s to the smaller world, 5 batches again at 0.1 s


def test_a_kill_of_the_last_worker_is_a_restarts_fault_judged_against_the_checkpoint():
    kill = Fault(0, schedule.KILL_RANK, 20.0, 0, TRAINING, epoch_logged=8, logged_at=19.0, step_time_s=0.1)
    attempts = [Attempt(0, 0.0, 25.0, 1, Said(resumed=(0, 0), resumed_at=1.0, steps=STEPS,
                                              worlds=[World(1.0, 2, (0, 0)), World(10.0, 1, (4, 0))]),
                        expected_next=(8, 0)),
                _attempt(1, 0, [World(40.0, 2, (8, 0))])]
    (out,) = accounting.outcomes([kill], attempts, STEPS, PROMISE)
    assert out.ended_attempt and out.held and (out.resumed, out.promised) == (8 * STEPS, 8 * STEPS)
    assert out.rejoined_s is None


def test_judge_returns_its_verdict_and_writes_into_none_of_its_arguments():
    fault = _leave()
    attempt = _attempt(0, 0, [World(1.0, 2, (0, 0)), World(23.0, 1, (9, 5)), World(50.0, 2, (16, 0))])
    fault_before, attempt_before = copy.deepcopy(fault), copy.deepcopy(attempt)
    verdict = elastic.judge(fault, attempt, 8 * STEPS + 5, False, STEPS, 0, PROMISE)
    assert isinstance(verdict, elastic.Verdict)
    assert (verdict.held, verdict.ended_attempt, verdict.rejoined_s) == (True, False, 15.0)
    assert (verdict.resumed, verdict.promised, verdict.lost, verdict.allowed) == (9 * STEPS + 5, 8 * STEPS, 0, 5)
    assert fault == fault_before and attempt == attempt_before
    ended = _attempt(0, 1, [World(1.0, 2, (0, 0))])
    ended_before = copy.deepcopy(ended)
    verdict = elastic.judge(fault, ended, 8 * STEPS + 5, False, STEPS, 0, PROMISE)
    assert (verdict.held, verdict.ended_attempt, verdict.resumed, verdict.wall_lost_s) == (False, True, None, None)
    assert ended == ended_before and fault == fault_before
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.held = True  # type: ignore[misc]


def test_the_world_changed_when_any_attempt_trained_on_fewer_ranks():
    full = [_attempt(0, 75, [World(1.0, 2, (0, 0))]), _attempt(1, 0, [World(30.0, 2, (4, 3))])]
    assert not elastic.world_changed(full, 2)
    assert elastic.world_changed(full + [_attempt(2, 0, [World(1.0, 2, (0, 0)), World(9.0, 1, (1, 0))])], 2)


# ------------------------------------------------------------------ the loop's wait for the full world


class _Run:
    def __init__(self, lines):
        self.lines = lines


def test_the_next_fault_waits_for_the_full_world_or_for_the_rejoin_limit(tmp_path):
    said = []
    loop = Loop(Job(["true"], {}, str(tmp_path), str(tmp_path), hosts_file=str(tmp_path / "hosts")), [], (1, 2),
                60.0, str(tmp_path), 1, say=said.append, promise=PROMISE)
    fault = _leave(at=20.0, back=35.0)
    lines = [(1.0, "rank 0/2: elastic starting at epoch 1, batch 0 (x)"),
             (23.0, "rank 0/1: elastic resuming at epoch 10, batch 5 (x)")]
    assert loop._rejoined(fault, _Run(lines), 60.0) == (fault, None)  # alone, within the limit: wait
    assert loop._rejoined(fault, _Run(lines), 96.0) == (None, 96.0)  # past it: go on, and say so
    assert "no full world within 60s" in said[-1]
    lines.append((50.0, "rank 0/2: elastic resuming at epoch 16, batch 0 (x)"))
    assert loop._rejoined(fault, _Run(lines), 51.0) == (None, 50.0)


# ------------------------------------------------------------------ the command line


def test_elastic_brings_its_kinds_its_launch_and_its_hosts_file(tmp_path):
    from benchmarks.soak.__main__ import COOLDOWN, ELASTIC_HOSTS, command, hosts_file, parse, promise

    args = parse(["--elastic", "--short"])
    assert args.kinds == list(schedule.ELASTIC_KINDS) and args.leave == 15.0
    cmd = command(args, "/w")
    assert cmd[cmd.index("--min-np") + 1] == "1" and cmd[cmd.index("--max-np") + 1] == "2" and "-H" not in cmd
    assert cmd[cmd.index("--blacklist-cooldown-range") + 1:][:2] == [str(c) for c in COOLDOWN]
    assert "hvdkeras.discover_hosts" in cmd[cmd.index("--host-discovery-script") + 1]
    assert "elastic.enabled=true" in cmd and "elastic.commit_every_batches=5" in cmd
    path = hosts_file(str(tmp_path))
    assert open(path).read() == "".join(f"{h}:1\n" for h in ELASTIC_HOSTS)
    assert promise(args).cooldown_s == float(COOLDOWN[1]) and promise(parse([])) is None
    assert "--min-np" not in command(parse(["--kinds", "kill_rank"]), "/w")


@pytest.mark.parametrize("argv,said", [
    (["--kinds", "host_leave"], "--kinds: host_leave needs an elastic job: add --elastic"),
    (["--elastic", "--kinds", "kill_rank,freeze"], "--kinds: freeze with --elastic: no promise for an elastic job"),
    (["--elastic", "--leave", "0"], "--leave and --rejoin-limit must be above 0; received: 0"),
])
def test_an_elastic_flag_out_of_place_gets_one_line_saying_what_to_do(argv, said, capsys):
    from benchmarks.soak.__main__ import parse

    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_the_finished_thread_of_a_host_leave_leaves_nothing_running(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("a:1\nb:1\n")
    before = threading.active_count()
    leave = faults.HostLeave(str(hosts), "b", 0.05)
    leave.start()
    leave.finish()
    assert threading.active_count() == before and hosts.read_text() == "a:1\nb:1\n"


def test_an_elastic_run_whose_world_changed_is_not_compared_bit_for_bit_and_the_report_says_so(tmp_path):
    from types import SimpleNamespace

    from benchmarks.soak.__main__ import _final

    args = SimpleNamespace(elastic=True, epochs=4, quiet_from=None)
    changed = SimpleNamespace(attempts=[_attempt(0, 0, [World(1.0, 2, (0, 0)), World(9.0, 1, (1, 0)),
                                                        World(30.0, 2, (3, 0))])])
    changed.attempts[0].said.final = {"val_accuracy": 0.98}
    final = _final(args, changed, None, str(tmp_path / "w"), str(tmp_path / "q"))
    assert final["verdict"].startswith("not comparable: the world changed") and final["worlds"] == "2->1->2"
    built = report.build([], changed.attempts, {}, STEPS, final)
    assert "\nfinal: not comparable: the world changed" in report.text(built)
    steady = SimpleNamespace(attempts=[_attempt(0, 0, [World(1.0, 2, (0, 0))])])
    assert _final(args, steady, None, str(tmp_path / "w"), str(tmp_path / "q")) == {}  # no quiet run, nothing to say
    quiet = {"epochs": 4, "val_accuracy": 0.98, "wall_s": 12.0}  # as benchmarks.soak.quiet_run reads it
    assert "cannot compare" in _final(args, steady, quiet, str(tmp_path / "w"), str(tmp_path / "q"))["verdict"]


def test_a_batch_takes_the_epochs_training_time_over_its_steps_not_the_step_time_alone():
    from benchmarks.soak.loop import batch_seconds

    record = {"step_time_s": 0.022, "train_time_s": 0.968}
    assert batch_seconds(record, 22) == pytest.approx(0.044)
    assert batch_seconds(record, None) == 0.022  # the steps not said yet
    assert batch_seconds({"step_time_s": 0.03}, 22) == 0.03
