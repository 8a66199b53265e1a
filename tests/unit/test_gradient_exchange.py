"""hvdkeras.gradient_exchange in one process: the implementation for this stack and the compression names."""
import horovod.tensorflow as hvd
import pytest

import hvdkeras
from hvdkeras import compat, gradient_exchange
from hvdkeras.gradient_exchange import compression


def test_one_call_for_both_stacks():
    assert hvdkeras.DistributedOptimizer is gradient_exchange.DistributedOptimizer
    assert gradient_exchange.IMPLEMENTATION == f"hvdkeras.gradient_exchange.{compat.STACK}"


def test_compression_names_map_to_horovods():
    assert compression.COMPRESSIONS == gradient_exchange.COMPRESSIONS == ("none", "fp16")
    assert compression.horovod_compression("none") is hvd.Compression.none
    assert compression.horovod_compression("fp16") is hvd.Compression.fp16
    with pytest.raises(ValueError, match="compression must be one of none, fp16; received: 'gzip'"):
        compression.horovod_compression("gzip")


def test_the_wrapped_optimizer_keeps_its_class_and_rate(hvd_single):
    optimizer = gradient_exchange.DistributedOptimizer(compat.keras.optimizers.SGD(0.3, momentum=0.9))
    assert isinstance(optimizer, compat.keras.optimizers.SGD)
    assert compat.get_learning_rate(optimizer) == pytest.approx(0.3)
