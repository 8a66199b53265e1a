"""hvdkeras.callbacks.preemption: the signal flag and the pipelined stop agreement, alone."""
import os
import signal
import threading

from hvdkeras.callbacks.preemption import PREEMPTED_EXIT, Preempted, SignalFlag, StopAgreement


def test_signal_flag_records_the_first_signal_instead_of_dying_and_uninstalls():
    before = signal.getsignal(signal.SIGTERM)
    flag = SignalFlag()
    assert flag.install()
    assert not flag.pending and flag.seconds_since() is None
    os.kill(os.getpid(), signal.SIGTERM)
    assert flag.pending and flag.signum == signal.SIGTERM and flag.seconds_since() >= 0
    first = flag.received_at
    os.kill(os.getpid(), signal.SIGTERM)
    assert flag.received_at == first  # the first signal's time is kept
    flag.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before


def test_signal_flag_does_nothing_off_the_main_thread():
    flag, out = SignalFlag(), []
    worker = threading.Thread(target=lambda: out.append(flag.install()))
    worker.start()
    worker.join()
    assert out == [False] and flag._previous == {}


def test_preempted_is_a_system_exit_with_its_own_status_and_line():
    exc = Preempted("preempted at epoch 3, batch 41; checkpoint written: /w/epoch-0002-batch-0041")
    assert isinstance(exc, SystemExit) and exc.code == PREEMPTED_EXIT == 75
    assert str(exc).startswith("preempted at epoch 3, batch 41")


class FakeClock:
    def __init__(self, step_s):
        self.now, self.step_s = 0.0, step_s

    def __call__(self):
        return self.now

    def tick(self):
        self.now += self.step_s


def test_one_process_checks_about_once_per_interval_and_names_each_check():
    clock = FakeClock(0.25)  # 4 batches per second
    names = iter(f"p.{i % 2}" for i in range(100))
    seen = []

    def reduce(vector, name):
        seen.append((name, list(vector)))
        return vector

    agreement = StopAgreement(reduce, is_root=True, names=lambda: next(names), interval_s=1.0, clock=clock)
    decisions = []
    for batch in range(12):
        clock.tick()
        decisions.append(agreement.decide(batch == 9))
    assert [name for name, _ in seen] == ["p.0", "p.1", "p.0", "p.1"]
    assert [vec[1] for _, vec in seen] == [1.0, 4.0, 4.0, 4.0]  # the first check proposes 1, then 1 s / 0.25 s
    assert agreement.checks == 4
    # checks at batches 1, 2, 6, 10: the flag raised during batch 10 stops at that check
    assert decisions.index(True) == 9 and decisions.count(True) == 1


def test_slow_steps_are_checked_every_batch():
    clock = FakeClock(3.0)
    agreement = StopAgreement(lambda v, n: v, is_root=True, interval_s=1.0, clock=clock)
    for _ in range(5):
        clock.tick()
        agreement.decide(False)
    assert agreement.checks == 5


def _two_ranks(flags_by_rank, step_s=(0.25, 0.5)):
    """Two StopAgreements on two threads over a fake element-wise sum; the call index each stops at.

    The ranks' clocks run at different speeds: only rank 0's decides the check interval.
    """
    barrier = threading.Barrier(2)
    votes = []
    lock = threading.Lock()

    def reduce(vector, name):
        with lock:
            votes.append(list(vector))
        barrier.wait(timeout=120)
        result = [sum(v[i] for v in votes) for i in range(2)]
        barrier.wait(timeout=120)
        with lock:
            votes.clear()
        barrier.wait(timeout=120)
        return result

    stopped = {}

    def rank_loop(rank):
        clock = FakeClock(step_s[rank])
        agreement = StopAgreement(reduce, is_root=rank == 0, clock=clock)
        for call, flag in enumerate(flags_by_rank[rank]):
            clock.tick()
            if agreement.decide(flag):
                stopped[rank] = call
                break

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return stopped


def test_a_flag_on_one_rank_stops_both_at_the_same_call():
    # SIGTERM reached rank 1 only, during its batch 4 (call index 3); checks at calls 0, 1, 5, 9, ...
    stopped = _two_ranks({0: [False] * 20, 1: [False] * 3 + [True] * 17})
    assert stopped == {0: 5, 1: 5}


def test_no_flag_no_stop():
    assert _two_ranks({0: [False] * 9, 1: [False] * 9}) == {}


def test_the_flag_counts_every_signal_and_keeps_the_first():
    flag = SignalFlag()
    flag._handle(signal.SIGTERM, None)
    flag._handle(signal.SIGINT, None)
    assert (flag.signum, flag.count) == (signal.SIGTERM, 2)
