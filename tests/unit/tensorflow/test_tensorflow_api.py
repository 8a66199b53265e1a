"""hvdkeras.tensorflow in one process: every public name of Horovod 0.28.1's ``horovod.tensorflow``, Horovod's
signatures, and the collectives given Keras 3 variables. Semantics on real ranks: Horovod's TensorFlow 2 examples
(``tests/distributed/test_horovod_examples.py``) and ``tests/distributed/test_same_training.py``."""
import inspect
import types

import horovod.tensorflow as horovod_tf
import numpy as np
import pytest
import tensorflow as tf

import hvdkeras.tensorflow as hvd
from hvdkeras.runtime import compat

# Horovod's own helpers that its module imports but does not offer as API.
NOT_API = {"LocalGradientAggregationHelper", "check_extension", "check_num_rank_power_of_2", "gpu_available",
           "handle_average_backwards_compatibility", "refs_to_vars", "split_list", "vars_to_refs"}
OWN = {"DistributedGradientTape", "PartialDistributedGradientTape", "DistributedOptimizer", "allreduce",
       "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "broadcast_", "alltoall", "reducescatter",
       "grouped_reducescatter", "broadcast_variables", "elastic", "SyncBatchNormalization"}


def _public(module):
    return {n for n in dir(module) if not n.startswith("_") and not isinstance(getattr(module, n), types.ModuleType)}


def test_every_public_name_of_horovod_tensorflow_is_here():
    missing = _public(horovod_tf) - NOT_API - set(dir(hvd))
    assert not missing, sorted(missing)


def test_the_rest_is_horovods_own_object():
    for name in _public(horovod_tf) - NOT_API - OWN:
        assert getattr(hvd, name) is getattr(horovod_tf, name), name


@pytest.mark.parametrize("name", ["DistributedGradientTape", "PartialDistributedGradientTape", "DistributedOptimizer",
                                  "allreduce", "broadcast_variables", "allgather", "broadcast"])
def test_horovods_arguments_in_horovods_order_with_horovods_defaults(name):
    ours = inspect.signature(getattr(hvd, name))
    theirs = inspect.signature(getattr(horovod_tf, name))
    assert [(p.name, p.default) for p in ours.parameters.values()] == [
        (p.name, p.default) for p in theirs.parameters.values()]


def test_the_collectives_take_keras_variables(hvd_single):
    variable = compat.keras.Variable(np.arange(3.0, dtype="float32")) if compat.KERAS_3 else tf.Variable(
        np.arange(3.0, dtype="float32"))
    np.testing.assert_array_equal(hvd.allreduce(variable).numpy(), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(hvd.allgather(variable).numpy(), [0.0, 1.0, 2.0])
    hvd.broadcast_variables([variable], root_rank=0)


def test_a_keras_optimizer_gets_hvdkeras_exchange_and_adasum_is_refused_in_one_line(hvd_single):
    optimizer = hvd.DistributedOptimizer(compat.keras.optimizers.SGD(0.1))
    assert isinstance(optimizer, compat.keras.optimizers.SGD)
    with pytest.raises(ValueError, match="op=hvd.Adasum applies to tf.compat.v1 optimizers only"):
        hvd.DistributedOptimizer(compat.keras.optimizers.SGD(0.1), op=hvd.Adasum)


@pytest.mark.skipif(not compat.KERAS_3, reason="Horovod's layer works on Keras 2")
def test_sync_batch_normalization_refuses_keras_3_in_one_line():
    with pytest.raises(NotImplementedError, match="would not be synchronized"):
        hvd.SyncBatchNormalization()


def test_elastic_names_are_horovods():
    for name in ("run", "TensorFlowKerasState", "TensorFlowState", "ObjectState"):
        assert hasattr(hvd.elastic, name)
    params = list(inspect.signature(hvd.elastic.TensorFlowKerasState).parameters)
    assert params[:3] == ["model", "optimizer", "backend"]
