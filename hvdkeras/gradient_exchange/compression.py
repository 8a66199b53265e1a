"""The wire format of the gradient allreduce: the one mapping between hvdkeras' names and Horovod's ``Compression``."""
from __future__ import annotations

import horovod.tensorflow as hvd

COMPRESSIONS = ("none", "fp16")


def horovod_compression(name):
    """``hvd.Compression.none`` or ``hvd.Compression.fp16`` (float32 gradients sent as float16).

    ``name`` is hvdkeras' name ("none", "fp16") or Horovod's compressor itself
    (``hvd.Compression.fp16``), as Horovod's scripts pass it.
    """
    if name in (hvd.Compression.none, hvd.Compression.fp16):
        return name
    if name not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)} (or hvd.Compression.none, "
                         f"hvd.Compression.fp16); received: {name!r}")
    return hvd.Compression.fp16 if name == "fp16" else hvd.Compression.none

