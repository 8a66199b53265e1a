"""hvdkeras.engines.failures: a typed failure crosses an engine's process boundary as one line and comes back typed."""
import pytest

from hvdkeras.common.errors import RankFailedError, SetupError
from hvdkeras.engines import failures


@pytest.mark.parametrize("error, base", [
    (failures.RankExitedError("rank 1 on h exited with status 9"), RankFailedError),
    (failures.RetriesExhaustedError("no retry left"), RankFailedError),
    (failures.CannotStartError("cannot start the rank's Python '/x' on this executor"), SetupError),
])
def test_a_carried_failure_comes_back_typed_from_inside_the_engines_text(error, base):
    raised = failures.carried(error)
    # what Spark hands the driver: its own words around the task's traceback
    text = (f"An error occurred while calling o42.collect.\n: org.apache.spark.SparkException: Job aborted\n"
            f"Traceback (most recent call last):\n  File \"gang.py\", line 1\nRuntimeError: {raised}\n\tat x.y(Z)\n")
    back = failures.received(RuntimeError(text))
    assert type(back) is type(error) and isinstance(back, base) and str(back) == str(error)


def test_text_without_a_carried_failure_or_with_a_forged_kind_gives_none():
    assert failures.received(RuntimeError("Job aborted: executor lost")) is None
    assert failures.received(RuntimeError('hvdkeras-failure {"kind": "SystemExit", "reason": "x"}')) is None
    assert failures.received(RuntimeError('hvdkeras-failure {"kind": "RankExitedError"')) is None
    assert failures.received(RuntimeError('hvdkeras-failure {"kind": "RankExitedError", "reason": 3}')) is None


def test_a_start_timeout_is_one_line_naming_the_tasks_and_the_fix():
    error = failures.start_timeout(2, 30, "an executor lost")
    assert isinstance(error, SetupError) and "\n" not in str(error)
    assert str(error) == ("the 2 ranks' Spark tasks did not all start within start_timeout=30 s (an executor lost);"
                          " check that the executors are alive and have 2 free task slots, or raise start_timeout")


def test_a_ranks_user_error_is_returned_as_refused_and_raised_typed_on_the_driver():
    import cloudpickle

    from hvdkeras.common.errors import ConfigError

    def rank(epochs):
        if epochs < 1:
            raise ConfigError(f"trainer.epochs must be at least 1 (Received: {epochs})", key="trainer.epochs")
        return {"epochs": epochs}

    wrapped = failures.returning_refusals(rank)
    assert wrapped(2) == {"epochs": 2}
    refused = cloudpickle.loads(cloudpickle.dumps(wrapped(0)))  # as it crosses from the rank to the driver
    assert isinstance(refused, failures.Refused)
    with pytest.raises(ConfigError) as error:
        failures.raise_refused([None, refused])
    assert str(error.value) == "trainer.epochs must be at least 1 (Received: 0)" and error.value.key == "trainer.epochs"
    assert failures.raise_refused([{"epochs": 2}, None]) == [{"epochs": 2}, None]
    with pytest.raises(ZeroDivisionError):  # a bug is not a user error: it fails the rank as before
        failures.returning_refusals(lambda: 1 / 0)()


@pytest.mark.parametrize("reason", [
    "ExecutorLostFailure (executor 3 exited caused by one of the running tasks) Reason: Container killed by YARN for"
    " exceeding memory limits. 9.1 GB of 9 GB physical memory used",
    "The executor with id 2 exited with exit code 137(SIGKILL, possible container OOM). Reason: OOMKilled",
    "java.lang.OutOfMemoryError: Java heap space",
])
def test_a_process_killed_for_memory_gets_the_advice_naming_the_page(reason):
    advice = failures.memory_advice(reason)
    assert advice.startswith("; a process was killed for its memory: ") and "spark.executor.memoryOverhead" in advice
    assert advice.endswith(f"({failures.MEMORY_PAGE})")


def test_another_failure_gets_no_memory_advice():
    assert failures.memory_advice("rank 1 exited with status 1: ZeroDivisionError") == ""
    assert failures.memory_advice("Command exited with code 137") == ""  # a SIGKILL alone: maybe a user's kill
