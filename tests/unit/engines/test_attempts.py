"""hvdkeras.engines.attempts: every start counted, a retry one warning line, one past max_retries refused."""
import threading

from hvdkeras.engines.attempts import LOST, Attempts


def test_starts_are_counted_the_retry_is_one_warning_line_naming_why_and_one_past_max_retries_is_refused(capsys):
    attempts = Attempts(max_retries=1, retry_hint=", from the top")
    assert attempts.start() == 0 and not attempts.exhausted
    attempts.failed("rank 1 on h exited with status -9")
    attempts.failed("rank 1 on h exited with status -9")  # told twice: said once
    assert attempts.start() == 1
    assert attempts.start() is None and attempts.exhausted
    err = capsys.readouterr().err
    assert err.count("starting the ranks again") == 1
    assert ("a rank failed (rank 1 on h exited with status -9); starting the ranks again, retry 1 of 1, from the top"
            in err)


def test_an_attempt_that_failed_before_rank_0_asked_counts_once_however_many_say_so():
    attempts = Attempts(max_retries=2)
    assert attempts.start() == 0
    assert attempts.why(0) == LOST  # nobody said why
    starts = attempts.starts
    threads = [threading.Thread(target=attempts.count_attempt_since, args=(starts,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert attempts.starts == 2


def test_why_names_the_first_three_distinct_reasons_since_an_index():
    attempts = Attempts()
    for reason in ("a", "b", "a", "c", "d"):
        attempts.failed(reason)
    assert attempts.why() == "a; b; c" and attempts.why(3) == "c; d"
