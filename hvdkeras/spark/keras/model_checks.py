"""A KerasEstimator's model against its columns: each input's shape from its feature column, each label's default.

Checked on the driver once the rows are surveyed (their columns' sizes are known), before they are written and any
rank starts: a feature column whose length does not fit its input is one line naming both.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from hvdkeras.common.errors import SetupError


def input_shapes(model: Any, prepared: Any) -> Tuple[Tuple[int, ...], ...]:
    """Each input's shape; one line when a feature column's length does not fit its input."""
    return feature_shapes(model, prepared.feature_cols, prepared.columns)


def feature_shapes(model: Any, feature_cols: Sequence[str], columns: Mapping[str, Any]) -> Tuple[Tuple[int, ...], ...]:
    """Each input's shape, from the ``columns``' infos (:class:`~hvdkeras.spark.common.data.ColumnInfo` by name): as
    soon as the rows are surveyed, before they are written. One line when a feature column's length does not fit its
    input, or the model's inputs are not one per feature column."""
    inputs = list(model.inputs)
    if len(inputs) != len(feature_cols):
        raise SetupError(f"the model has {len(inputs)} inputs but feature_cols names {len(feature_cols)}"
                         f" columns {list(feature_cols)}; name one column per input, in order")
    shapes = []
    for column, tensor in zip(feature_cols, inputs):
        shape = tuple(-1 if d is None else int(d) for d in tuple(tensor.shape)[1:])
        size = columns[column].size
        need = int(np.prod([d for d in shape if d != -1])) if shape else 1
        if (-1 not in shape and need != size) or (-1 in shape and size % max(need, 1)):
            raise SetupError(f"feature column {column!r} holds {size} values per row, but the model's input"
                             f" {getattr(tensor, 'name', '')!r} takes shape {shape} ({need} values);"
                             " reshape the column or the input")
        shapes.append(shape)
    return tuple(shapes)


def output_shapes(model: Any, prepared: Any) -> Optional[List[Optional[Tuple[int, ...]]]]:
    """Each label column's default shape, as Horovod's: its output's, where the column holds as many values per
    row as the output (a 0/1 label of a ``(None, 1)`` output, a one-hot vector); else None: as read."""
    outputs = list(model.outputs)
    if len(outputs) != len(prepared.label_cols):
        return None
    shapes: List[Optional[Tuple[int, ...]]] = []
    for column, tensor in zip(prepared.label_cols, outputs):
        shape = tuple(tensor.shape)[1:]
        known = all(d is not None for d in shape)
        size = int(np.prod([int(d) for d in shape])) if known else -1
        shapes.append(tuple(int(d) for d in shape) if known and size == prepared.columns[column].size else None)
    return shapes if any(s is not None for s in shapes) else None
