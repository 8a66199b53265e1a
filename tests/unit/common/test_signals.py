"""hvdkeras.common.signals: SIGTERM noted or acted on, and the process's flag (SIGTERM during start-up too)."""
import os
import signal

import pytest

from hvdkeras.common import signals


def test_a_flag_acts_on_its_first_signal_unless_watched_and_acts_on_a_missed_one_when_released():
    left = []
    flag = signals.SignalFlag(leave=left.append)
    assert flag.install()
    try:
        flag.watch()
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.pending and left == []  # watched: only noted (a fit's stop agreement acts on it)
        flag.unwatch()
        assert left == [signal.SIGTERM]  # released with a signal no one acted on: acts at once
        os.kill(os.getpid(), signal.SIGTERM)
        assert left == [signal.SIGTERM] and flag.count == 2  # the first signal only
    finally:
        flag.uninstall()


def test_the_process_flag_ends_the_rank_as_a_preemption_with_nothing_to_save(capsys):
    before = signal.getsignal(signal.SIGTERM)
    flag = signals.install_process_flag()
    assert flag is signals.process_flag() and signal.getsignal(signal.SIGTERM) != before
    with pytest.raises(signals.Preempted) as caught:
        os.kill(os.getpid(), signal.SIGTERM)
    assert caught.value.code == signals.PREEMPTED_EXIT == 75
    assert str(caught.value) == signals.NOTHING_TO_SAVE
    assert capsys.readouterr().err == f"hvdkeras: {signals.NOTHING_TO_SAVE}\n"
    assert flag.pending  # a fit that began anyway still sees it
    signals.install_process_flag()  # a new job in the same process: a new flag, nothing pending
    assert not signals.process_flag().pending
    signals.uninstall_process_flag()
    assert signals.process_flag() is None and signal.getsignal(signal.SIGTERM) == before


def test_a_failed_collective_after_a_sigterm_is_a_preemption_carrying_its_line():
    lost = RuntimeError("rank 1 on host h is not responding (...); rerun the same command to resume"
                        " from the last checkpoint (checkpoint epoch 3)")
    assert signals.preempted_instead(lost) is None  # no flag: the failure stays a failure
    flag = signals.install_process_flag()
    assert signals.preempted_instead(lost) is None  # no signal yet
    flag.watch()  # a fit's preemption callback took the flag over
    os.kill(os.getpid(), signal.SIGTERM)
    preempted = signals.preempted_instead(lost)
    assert preempted.code == signals.PREEMPTED_EXIT
    assert str(preempted) == f"preempted (SIGTERM) but the ranks could not stop together: {lost}"


def test_a_job_in_a_thread_leaves_the_main_threads_handler_in_place():
    # A tuning's fits (Spark ML's TrainValidationSplit) run in threads; a second job in a thread may not touch the
    # handlers (Python allows signal.signal on the main thread only), nor fail trying
    import threading

    flag = signals.install_process_flag()
    try:
        assert flag is not None and signal.getsignal(signal.SIGTERM) == flag._handle
        seen = {}
        thread = threading.Thread(target=lambda: seen.update(flag=signals.install_process_flag()))
        thread.start()
        thread.join()
        assert seen == {"flag": None}
        assert signals.process_flag() is flag and signal.getsignal(signal.SIGTERM) == flag._handle
    finally:
        signals.uninstall_process_flag()
