"""hvdkeras.runtime.distributed process setup, exercised on CPU with stand-in devices."""
import numpy as np
import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.runtime import distributed
from tests.unit.helpers import process_info


class FakeDevice:
    def __init__(self, index):
        self.name = f"/physical_device:GPU:{index}"
        self.device_type = "GPU"


class RecordingConfig:
    """Records what pin_local_gpu asks of tf.config."""

    def __init__(self):
        self.visible = None
        self.growth = []
        outer = self

        class Experimental:
            @staticmethod
            def set_memory_growth(device, enabled):
                outer.growth.append((device.name, enabled))

        self.experimental = Experimental()

    def set_visible_devices(self, devices, device_type):
        self.visible = ([d.name for d in devices], device_type)


@pytest.mark.parametrize("local_rank", [0, 1, 3])
def test_each_process_sees_only_its_local_gpu(local_rank):
    gpus = [FakeDevice(i) for i in range(4)]
    rec = RecordingConfig()
    chosen = distributed.pin_local_gpu(gpus, local_rank, memory_growth=True, tf_config=rec)
    assert chosen is gpus[local_rank]
    assert rec.visible == ([f"/physical_device:GPU:{local_rank}"], "GPU")
    assert rec.growth == [(f"/physical_device:GPU:{local_rank}", True)]


def test_memory_growth_can_be_off():
    rec = RecordingConfig()
    distributed.pin_local_gpu([FakeDevice(0)], 0, memory_growth=False, tf_config=rec)
    assert rec.growth == [] and rec.visible == (["/physical_device:GPU:0"], "GPU")


def test_no_gpus_means_no_pinning():
    rec = RecordingConfig()
    assert distributed.pin_local_gpu([], 0, tf_config=rec) is None
    assert rec.visible is None


def test_more_ranks_than_gpus_is_a_clear_error():
    with pytest.raises(SetupError, match=r"local rank 2 has no GPU: this host has 2 GPU\(s\).*-H host:2"):
        distributed.pin_local_gpu([FakeDevice(0), FakeDevice(1)], 2, tf_config=RecordingConfig())


def test_fingerprint_sees_any_change():
    a = [np.zeros((2, 2), np.float32), np.ones(3, np.float32)]
    b = [np.zeros((2, 2), np.float32), np.ones(3, np.float32)]
    assert distributed.fingerprint(a) == distributed.fingerprint(b)
    b[1][2] = np.nextafter(np.float32(1), np.float32(2))
    assert distributed.fingerprint(a) != distributed.fingerprint(b)
    assert distributed.fingerprint([np.zeros(4)]) != distributed.fingerprint([np.zeros((2, 2))])


def test_only_rank_0_is_the_chief():
    assert process_info(rank=0, size=2).is_chief and not process_info(rank=1, size=2).is_chief


def test_single_process_collectives_return_this_ranks_values(hvd_single):
    assert distributed.allreduce_sum(np.array([1.5, 2.0]), name="t.sum").tolist() == [1.5, 2.0]
    assert distributed.any_rank(True, name="t.any") and not distributed.any_rank(False, name="t.none")
    assert distributed.agree_min(7, name="t.min") == 7
    assert distributed.ranks_disagreeing([np.ones(3)], name="t.agree") == 0
    distributed.preflight({"config": "abc", "steps": 3}, name="t.preflight")  # one rank agrees with itself


def test_cycled_names_alternate_per_base_and_start_over_together():
    distributed.reset_cycled_names()
    assert [distributed.cycled_name("a") for _ in range(3)] == ["a.0", "a.1", "a.0"]
    assert distributed.cycled_name("b") == "b.0"  # each base counts alone
    distributed.reset_cycled_names()
    assert distributed.cycled_name("a") == "a.0"


# The messages of real failures: the first seen when a peer was SIGKILLed during a Keras 3 step (an
# elastic job's survivor must reset on it, not exit); the others Horovod's own.
GLOO_IN_FLIGHT = ("Graph execution error:\n\nDetected at node hvdkeras.grad.6 defined at (most recent call last):\n"
                  "[.../third_party/compatible17_gloo/gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:53169: "
                  "Connection reset by peer\n\t [[{{node hvdkeras.grad.6}}]] "
                  "[Op:__inference_multi_step_on_iterator_948]")


@pytest.mark.parametrize("message", [
    GLOO_IN_FLIGHT,
    "Horovod has been shut down. This was caused by an exception on one of the ranks",
    "Read error [127.0.0.1]:5 [[{{node DistributedGradientTape_Allreduce/HorovodAllreduce_grads_0}}]]",
    "Connection closed by peer [[{{node hvdkeras.grads.0}}]]",
])
def test_a_failed_horovod_op_is_told_by_its_message(message):
    import tensorflow as tf

    assert distributed.is_horovod_op_failure(tf.errors.UnknownError(None, None, message))


@pytest.mark.parametrize("error", [
    ("UnknownError", "ValueError: a bug in the user's py_function [[{{node EagerPyFunc}}]]"),
    ("InvalidArgumentError", "Horovod: shapes differ"),  # not an UnknownError: a bug to report, not a lost peer
])
def test_other_errors_are_not_horovod_op_failures(error):
    import tensorflow as tf

    kind, message = error
    assert not distributed.is_horovod_op_failure(getattr(tf.errors, kind)(None, None, message))
