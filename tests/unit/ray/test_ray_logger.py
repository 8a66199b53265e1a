"""hvdkeras.ray.ray_logger: a rank's values reach the driver's callbacks in order, a callback's error is raised when
the run ends, and ``log`` without callbacks warns once; Ray's queue stood in by a local one (the real cluster's run
is tests/distributed/test_ray.py's)."""
import queue as std_queue
import types

import pytest

from hvdkeras.ray import ray_logger

ray_queue = pytest.importorskip("ray.util.queue", reason="the [ray] extra is not installed")


class LocalQueue:
    """``ray.util.queue.Queue``'s calls that the relay and ``log`` make, in this process."""

    made = []

    def __init__(self, actor_options=None):
        self.actor_options, self.items, self.closed = actor_options, std_queue.Queue(), False
        LocalQueue.made.append(self)

    def put(self, item):
        self.items.put(item)

    def get(self, timeout=None):
        try:
            return self.items.get(timeout=timeout)
        except std_queue.Empty:
            raise ray_queue.Empty from None

    def shutdown(self):
        self.closed = True


class Worker:
    def __init__(self):
        self.set_queue = types.SimpleNamespace(remote=ray_logger.configure)


FAKE_RAY = types.SimpleNamespace(get=lambda refs: refs,
                                 get_runtime_context=lambda: types.SimpleNamespace(get_node_id=lambda: "a" * 56))


@pytest.fixture(autouse=True)
def local_queue(monkeypatch):
    monkeypatch.setattr(ray_queue, "Queue", LocalQueue)
    monkeypatch.setattr(ray_logger, "_warned", False)
    LocalQueue.made.clear()
    yield
    ray_logger.configure(None)


def test_every_logged_value_reaches_each_callback_in_order_and_the_queue_takes_no_cpu():
    first, second = [], []
    with ray_logger.relay(FAKE_RAY, [first.append, second.append], lambda: [Worker(), Worker()]) as queue:
        for step in range(5):
            ray_logger.log({"step": step})
    assert first == second == [{"step": s} for s in range(5)]  # the last ones too, before the call returns
    assert queue.closed and queue.actor_options["num_cpus"] == 0


def test_horovods_own_ray_logger_sends_to_the_same_callbacks():
    horovods = pytest.importorskip("horovod.ray.ray_logger", reason="Horovod's Ray module does not import here")
    seen = []
    with ray_logger.relay(FAKE_RAY, [seen.append], lambda: [Worker()]):
        horovods.log({"via": "horovod"})
    assert seen == [{"via": "horovod"}]


def test_a_callbacks_error_is_raised_once_the_run_ends_and_the_others_still_get_every_value():
    seen = []

    def broken(value):
        raise ValueError(f"Received: {value}")

    with pytest.raises(ValueError, match=r"^Received: 0$"):
        with ray_logger.relay(FAKE_RAY, [broken, seen.append], lambda: [Worker()]):
            ray_logger.log(0)
            ray_logger.log(1)
    assert seen == [0, 1]


def test_without_callbacks_there_is_no_queue_and_log_warns_once(capsys):
    with ray_logger.relay(FAKE_RAY, None, lambda: [Worker()]) as queue:
        assert queue is None and LocalQueue.made == []
    ray_logger.log({"a": 1})
    ray_logger.log({"a": 2})
    assert capsys.readouterr().err.count("the values go nowhere") == 1
