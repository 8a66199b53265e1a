"""Process setup rules, exercised on CPU with stand-in devices."""
import pytest

from hvdkeras import distributed


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
    with pytest.raises(distributed.SetupError, match=r"local rank 2 has no GPU: this host has 2 GPU\(s\).*-H host:2"):
        distributed.pin_local_gpu([FakeDevice(0), FakeDevice(1)], 2, tf_config=RecordingConfig())


@pytest.mark.parametrize("cores, ranks, intra, inter", [
    (2, 2, 1, 1), (2, 1, 2, 1), (16, 2, 8, 2), (64, 8, 8, 2), (3, 4, 1, 1), (96, 1, 96, 24),
])
def test_thread_budget(cores, ranks, intra, inter):
    assert distributed.thread_budget(cores, ranks) == distributed.ThreadBudget(intra, inter)


def test_thread_budget_overrides():
    assert distributed.thread_budget(16, 2, intra_op=3, inter_op=5) == distributed.ThreadBudget(3, 5)


def test_fingerprint_sees_any_change():
    import numpy as np

    a = [np.zeros((2, 2), np.float32), np.ones(3, np.float32)]
    b = [np.zeros((2, 2), np.float32), np.ones(3, np.float32)]
    assert distributed.fingerprint(a) == distributed.fingerprint(b)
    b[1][2] = np.nextafter(np.float32(1), np.float32(2))
    assert distributed.fingerprint(a) != distributed.fingerprint(b)
    assert distributed.fingerprint([np.zeros(4)]) != distributed.fingerprint([np.zeros((2, 2))])


def test_launcher_rank(monkeypatch):
    for var in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    assert distributed.launcher_rank() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert distributed.launcher_rank() == 3


def test_stall_settings_become_horovod_environment():
    from hvdkeras import config as config_lib

    cfg = config_lib.load(None, ["horovod.stall_warning_seconds=30", "horovod.stall_shutdown_seconds=300"])
    assert distributed.stall_environment(cfg.horovod) == {"HOROVOD_STALL_CHECK_TIME_SECONDS": "30",
                                                          "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "300"}
    off = config_lib.load(None, ["horovod.stall_warning_seconds=0"])
    assert distributed.stall_environment(off.horovod) == {"HOROVOD_STALL_CHECK_DISABLE": "1"}
    with pytest.raises(config_lib.ConfigError, match="longer than horovod.stall_warning_seconds"):
        config_lib.load(None, ["horovod.stall_warning_seconds=60", "horovod.stall_shutdown_seconds=30"])


def test_horovod_knobs_resolved_per_host_and_exported():
    from hvdkeras import config as config_lib

    cfg = config_lib.load(None, ["horovod.timeline=timeline.json", "horovod.autotune=true",
                                 "horovod.autotune_log=autotune.csv", "horovod.hierarchical_allreduce=true"])
    cpu = distributed.resolve_horovod(cfg.horovod, has_gpu=False)
    gpu = distributed.resolve_horovod(cfg.horovod, has_gpu=True)
    assert (cpu.cycle_time_ms, gpu.cycle_time_ms, cpu.fusion_threshold_mb) == (10.0, 1.0, None)
    env = distributed.horovod_environment(cpu, workdir="/w")
    assert env["HOROVOD_CYCLE_TIME"] == "10" and "HOROVOD_FUSION_THRESHOLD" not in env  # Horovod's default
    assert env["HOROVOD_TIMELINE"] == "/w/timeline.json" and env["HOROVOD_AUTOTUNE_LOG"] == "/w/autotune.csv"
    assert env["HOROVOD_AUTOTUNE"] == "1" and env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"
    explicit = config_lib.load(None, ["horovod.cycle_time_ms=3.5", "horovod.fusion_threshold_mb=0"]).horovod
    assert distributed.resolve_horovod(explicit, has_gpu=False).cycle_time_ms == 3.5
    assert distributed.horovod_environment(distributed.resolve_horovod(explicit, False))["HOROVOD_FUSION_THRESHOLD"] == "0"
