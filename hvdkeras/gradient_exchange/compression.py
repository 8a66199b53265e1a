"""The wire format of the gradient allreduce by name: the one mapping to Horovod's ``Compression``."""
from __future__ import annotations

import horovod.tensorflow as hvd

COMPRESSIONS = ("none", "fp16")


def horovod_compression(name: str):
    """``hvd.Compression.none`` or ``hvd.Compression.fp16`` (float32 gradients sent as float16)."""
    if name not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}; received: {name!r}")
    return hvd.Compression.fp16 if name == "fp16" else hvd.Compression.none
