"""The options of a distributed optimizer, checked once, with Horovod's names and meaning.

Both implementations (:mod:`~hvdkeras.gradient_exchange.keras2`,
:mod:`~hvdkeras.gradient_exchange.keras3`) take one :class:`ExchangeOptions`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import horovod.tensorflow as hvd

from hvdkeras.gradient_exchange.compression import horovod_compression
from hvdkeras.runtime import compat


@dataclasses.dataclass(frozen=True)
class ExchangeOptions:
    """How gradients are combined over ranks; the fields are the arguments of Horovod's ``DistributedOptimizer``.

    * ``op``: ``hvd.Average`` (default) or ``hvd.Sum``.
    * ``gradient_predivide_factor = f``: with ``hvd.Average``, each gradient is scaled by
      ``1/f`` before the sum and by ``f/size`` after it (the average is the same; ``f``
      chooses where the division happens, against overflow in fp16).
    * ``groups``: ``None`` or ``0``: one request per gradient; ``k > 0``: ``k`` grouped
      requests; a list of lists of variables: each inner list one request, every other
      gradient its own.
    * ``process_set``: the ranks that average (Horovod's ``ProcessSet``).
    * ``scale_local_gradients``: the gradients of local variables (never averaged, see
      :func:`~hvdkeras.gradient_exchange.PartialDistributedOptimizer`) are divided by
      the size of the process set, as Horovod does.
    """

    name: Optional[str] = None
    device_dense: str = ""
    device_sparse: str = ""
    compression: Any = hvd.Compression.none
    sparse_as_dense: bool = False
    gradient_predivide_factor: float = 1.0
    op: Any = hvd.Average
    backward_passes_per_step: int = 1
    average_aggregated_gradients: bool = False
    groups: Union[None, int, Sequence[Sequence[Any]]] = None
    process_set: Any = hvd.global_process_set
    scale_local_gradients: bool = True

    def __post_init__(self):
        object.__setattr__(self, "compression", horovod_compression(self.compression))
        if self.op not in (hvd.Average, hvd.Sum):
            raise ValueError(f"op must be hvd.Average or hvd.Sum (Horovod's DistributedOptimizer supports only "
                             f"these); received: op={self.op!r}")
        if self.gradient_predivide_factor != 1.0 and self.op != hvd.Average:
            raise ValueError("gradient_predivide_factor applies to op=hvd.Average only; received: "
                             f"gradient_predivide_factor={self.gradient_predivide_factor}, op={self.op!r}")
        if not self.gradient_predivide_factor > 0:
            raise ValueError(f"gradient_predivide_factor must be > 0; received: {self.gradient_predivide_factor}")
        if int(self.backward_passes_per_step) < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1; received: {self.backward_passes_per_step}")
        groups: Any = self.groups  # as given: checked and normalised here
        if isinstance(groups, (list, tuple)):
            if not all(isinstance(g, (list, tuple)) for g in groups):
                raise ValueError("groups must be a number of groups or a list of lists of variables; received: "
                                 f"groups={groups!r}")
            groups = [list(g) for g in groups]
        elif groups is not None:
            if int(groups) < 0:
                raise ValueError(f"groups must be >= 0 (0 or None: one request per gradient); received: {groups}")
            groups = int(groups) or None
        object.__setattr__(self, "groups", groups)

    @property
    def scale_factors(self):
        """(prescale, postscale) of every gradient allreduce, Horovod's split of the average."""
        if self.op == hvd.Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0


def local_layer_list(local_layers) -> list:
    """``local_layers`` (``None``, one Keras layer or several) as a list; raises ``ValueError`` naming anything else."""
    if local_layers is None:
        return []
    if isinstance(local_layers, compat.keras.layers.Layer):
        return [local_layers]
    if not all(isinstance(layer, compat.keras.layers.Layer) for layer in local_layers):
        raise ValueError(f"local_layers must be Keras layers; received: {local_layers!r}")
    return list(local_layers)
