"""hvdkeras.training.assembly: the config resolved once, and the parts built from a config, a world and a task."""
import os

from hvdkeras import config as config_lib
from hvdkeras.common.workdir import Workdir
from hvdkeras.training import assembly
from tests.unit.helpers import config_file, process_info


def tiny_config(*overrides):
    return config_lib.load(config_file("digits.yaml"), [
        "trainer.epochs=2", "trainer.steps_per_epoch=3", "trainer.verbose=0", "checkpoint.enabled=false",
        "data.global_batch_size=16", *overrides])


def test_resolved_for_host_fills_in_the_host_choices():
    cfg = tiny_config()
    resolved = assembly.resolved_for_host(cfg, process_info())
    assert cfg.horovod.cycle_time_ms is None and resolved.horovod.cycle_time_ms is None  # Horovod's own 1 ms
    assert (resolved.runtime.intra_op_threads, resolved.runtime.inter_op_threads) == (1, 1)
    assert resolved.sources == cfg.sources  # errors still name where values came from


def test_compile_model_keeps_mixed_precision_to_the_model(hvd_single):
    from hvdkeras.runtime import compat
    from hvdkeras.training import data as data_lib

    cfg = tiny_config("runtime.mixed_precision=mixed_float16")
    data = data_lib.build(cfg.data, data_lib.Shard(0, 1), seed=0)
    model, _ = assembly.compile_model(cfg, data, 1)
    assert compat.keras.mixed_precision.global_policy().name == "float32"  # the process is as it was
    assert {layer.dtype_policy.name for layer in model.layers if layer.weights} == {"mixed_float16"}
    assert compat.loss_scale(model.optimizer) is not None  # dynamic loss scaling, as under the policy


def test_make_backup_follows_the_checkpoint_section(tmp_path):
    assert assembly.make_backup(tiny_config(), str(tmp_path)) is None
    backup = assembly.make_backup(tiny_config("checkpoint.enabled=true", "checkpoint.keep=2",
                                                 "checkpoint.every_epochs=3"), str(tmp_path))
    assert backup.backup_dir == Workdir(str(tmp_path)).checkpoints and backup.store.keep == 2
    assert backup.every_epochs == 3 and backup.delete_checkpoint is False
    assert not os.listdir(tmp_path)


def test_one_view_per_world_size():
    cfg = tiny_config("data.per_rank_batch_size=8", "data.global_batch_size=null", "elastic.enabled=true",
                      "elastic.on_resize=keep_rank_batch")
    job = assembly.JobConfig.for_process(cfg, process_info(size=2, local_size=2))
    assert job.requested is cfg and job.initial_size == 2
    assert job.for_world(2).data.global_batch_size == 16 and job.for_world(3).data.global_batch_size == 24
    assert job.for_world(3).optimizer == job.resolved.optimizer  # only the data section differs by world
    kept = assembly.JobConfig.for_process(tiny_config(), process_info(size=2, local_size=2))
    assert kept.for_world(1).data.global_batch_size == 16  # keep_global_batch


def test_the_position_and_the_backup_share_one_store(tmp_path):
    cfg = tiny_config("checkpoint.enabled=true")
    position = assembly.make_position(cfg, str(tmp_path))
    backup = assembly.make_backup(cfg, str(tmp_path), position)
    assert backup.position is position and backup.store is position.store
    assert assembly.make_position(cfg, None).store is None and assembly.make_backup(cfg, None) is None
    assert assembly.make_position(tiny_config(), str(tmp_path)).store is None
    assert not os.listdir(tmp_path)

