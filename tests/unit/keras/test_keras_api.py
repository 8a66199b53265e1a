"""hvdkeras.keras in one process: every public name of Horovod 0.28.1's Keras API, with Horovod's signatures.

Horovod's signatures are written out below (Horovod 0.28.1, the last release:
``horovod/tensorflow/keras/{__init__,callbacks,elastic}.py`` and ``horovod/keras``'s
``PartialDistributedOptimizer``). On the keras2 stack, where Horovod's Keras module
imports and runs, the table is also checked against the installed Horovod. The
semantics are checked on real ranks (``tests/distributed/test_horovod_keras_api.py``).
"""
import inspect

import horovod.tensorflow as horovod_tf
import pytest

import hvdkeras.keras as hvd
from hvdkeras.runtime import compat

_ = inspect.Parameter.empty
NONE = horovod_tf.Compression.none
GLOBAL = horovod_tf.global_process_set

# name -> [(parameter, default)] in Horovod's order (``_``: required).
HOROVOD_SIGNATURES = {
    "DistributedOptimizer": [
        ("optimizer", _), ("name", None), ("device_dense", ""), ("device_sparse", ""), ("compression", NONE),
        ("sparse_as_dense", False), ("gradient_predivide_factor", 1.0), ("op", horovod_tf.Average),
        ("backward_passes_per_step", 1), ("average_aggregated_gradients", False), ("num_groups", 0),
        ("groups", None), ("process_set", GLOBAL), ("scale_local_gradients", True)],
    "PartialDistributedOptimizer": [
        ("optimizer", _), ("name", None), ("device_dense", ""), ("device_sparse", ""), ("compression", NONE),
        ("sparse_as_dense", False), ("gradient_predivide_factor", 1.0), ("op", horovod_tf.Average),
        ("groups", None), ("process_set", GLOBAL), ("local_layers", None), ("scale_local_gradients", True)],
    "broadcast_global_variables": [("root_rank", _)],
    "allreduce": [("value", _), ("name", None), ("average", None), ("prescale_factor", 1.0),
                  ("postscale_factor", 1.0), ("op", None), ("compression", NONE)],
    "allgather": [("value", _), ("name", None)],
    "broadcast": [("value", _), ("root_rank", _), ("name", None)],
    "reducescatter": [("value", _), ("name", None), ("op", horovod_tf.Average)],
    "load_model": [("filepath", _), ("custom_optimizers", None), ("custom_objects", None), ("compression", NONE),
                   ("legacy_opts", False)],
    "callbacks.BroadcastGlobalVariablesCallback": [("root_rank", _), ("device", ""), ("local_variables", None)],
    "callbacks.MetricAverageCallback": [("device", "")],
    "callbacks.LearningRateScheduleCallback": [
        ("initial_lr", _), ("multiplier", _), ("start_epoch", 0), ("end_epoch", None), ("staircase", True),
        ("momentum_correction", True), ("steps_per_epoch", None)],
    "callbacks.LearningRateWarmupCallback": [
        ("initial_lr", _), ("warmup_epochs", 5), ("momentum_correction", True), ("steps_per_epoch", None),
        ("verbose", 0)],
    "callbacks.BestModelCheckpoint": [("monitor", "val_loss"), ("verbose", 0), ("save_weights_only", False),
                                      ("mode", "auto"), ("save_freq", "epoch")],
    "elastic.KerasState": [("model", _), ("optimizer", None)],
    "elastic.CommitStateCallback": [("state", _), ("batches_per_commit", 1)],
    "elastic.UpdateBatchStateCallback": [("state", _)],
    "elastic.UpdateEpochStateCallback": [("state", _)],
    "elastic.run": [("func", _)],
}
PROCESS_STATE = ["init", "shutdown", "is_initialized", "start_timeline", "stop_timeline", "size", "local_size",
                 "cross_size", "rank", "local_rank", "cross_rank", "mpi_threads_supported", "mpi_enabled",
                 "mpi_built", "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
                 "rocm_built", "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
                 "Average", "Sum", "Compression"]


def resolve(module, dotted):
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def parameters(obj):
    """[(name, default)] of a function or a class's ``__init__``, without ``self`` and ``*args``/``**kwargs``."""
    params = inspect.signature(obj).parameters.values()
    return [(p.name, p.default) for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


@pytest.mark.parametrize("name", PROCESS_STATE)
def test_the_process_state_is_horovods_own(name):
    assert resolve(hvd, name) is getattr(horovod_tf, name)


@pytest.mark.parametrize("name", sorted(HOROVOD_SIGNATURES))
def test_horovods_arguments_come_first_in_horovods_order_with_horovods_defaults(name):
    ours = parameters(resolve(hvd, name))
    horovod = HOROVOD_SIGNATURES[name]
    assert [p for p, _d in ours[:len(horovod)]] == [p for p, _d in horovod], ours
    for (param, default), (_p, our_default) in zip(horovod, ours):
        if default is not _:  # where Horovod requires an argument, a default here is a superset
            assert our_default == default, (param, our_default, default)


@pytest.mark.skipif(not compat.HOROVOD_KERAS_LAYER, reason="Horovod's Keras layer imports on Keras 2 only")
def test_the_table_is_horovods_installed_keras_api():
    import horovod.keras as horovod_keras
    import horovod.tensorflow.keras as horovod_tf_keras

    for name, expected in HOROVOD_SIGNATURES.items():
        module = horovod_keras if name == "PartialDistributedOptimizer" else horovod_tf_keras
        assert parameters(resolve(module, name)) == expected, name
    public = {n for n in vars(horovod_tf_keras) if not n.startswith("_") and n not in ("K", "keras", "tf",
                                                                                        "inspect", "warnings",
                                                                                        "version",
                                                                                        "is_version_greater_equal_than")}
    assert public <= set(vars(hvd)), sorted(public - set(vars(hvd)))


def test_compression_is_given_as_horovods_object_or_by_name(hvd_single):
    for compression in (hvd.Compression.fp16, "fp16"):
        optimizer = hvd.DistributedOptimizer(compat.keras.optimizers.SGD(0.1), compression=compression)
        assert isinstance(optimizer, compat.keras.optimizers.SGD)


@pytest.mark.parametrize("kwargs, message", [
    ({"op": hvd.Sum, "gradient_predivide_factor": 2.0}, "gradient_predivide_factor applies to op=hvd.Average only"),
    ({"op": horovod_tf.Adasum}, "op must be hvd.Average or hvd.Sum"),
    ({"compression": "gzip"}, "compression must be one of none, fp16"),
    ({"groups": -1}, r"groups must be >= 0 .*received: -1"),
    ({"backward_passes_per_step": 0}, "backward_passes_per_step must be >= 1; received: 0"),
])
def test_wrong_arguments_fail_in_one_line_naming_them(hvd_single, kwargs, message):
    with pytest.raises(ValueError, match=message):
        hvd.DistributedOptimizer(compat.keras.optimizers.SGD(0.1), **kwargs)


def test_local_layers_must_be_layers(hvd_single):
    with pytest.raises(ValueError, match="local_layers must be Keras layers"):
        hvd.PartialDistributedOptimizer(compat.keras.optimizers.SGD(0.1), local_layers=["dense"])


def test_broadcast_global_variables_names_the_callback_instead():
    with pytest.raises(RuntimeError, match=r"BroadcastGlobalVariablesCallback\(0\)"):
        hvd.broadcast_global_variables(0)


def test_keras_state_refuses_a_model_without_weights(hvd_single):
    model = compat.keras.Sequential([compat.keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="KerasState needs a built model.*model.build"):
        hvd.elastic.KerasState(model, epoch=0)


def test_best_model_checkpoint_without_a_file_name_says_to_set_one(hvd_single):
    from tests.unit.helpers import attach, small_bn_model

    callback = attach(hvd.callbacks.BestModelCheckpoint(monitor="loss"), small_bn_model())
    with pytest.raises(ValueError, match="set `callback.filepath`.*Received: filepath=None"):
        callback.on_train_begin()
