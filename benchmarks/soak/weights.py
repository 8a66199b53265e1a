"""The soaked run's final weights against a quiet run's: the one part of the soak that imports TensorFlow."""
from __future__ import annotations

import os
from typing import Any, Dict

from hvdkeras.common.checkpoint_format import PREFIX


def _is_model_variable(key: str) -> bool:
    """Whether a checkpoint key holds a model variable (Keras 2 under ``model/``; Keras 3 keeps the trainable ones
    one level nearer, under ``optimizer/_trainable_variables/``), as the preemption test reads them."""
    if key.startswith("model/"):
        return "OPTIMIZER_SLOT" not in key
    return key.startswith("optimizer/_trainable_variables/")


def model_variables(folder: str) -> Dict[str, Any]:
    """Every model variable of the checkpoint in ``folder``, by its key."""
    from hvdkeras.runtime import tensorflow_import

    tf = tensorflow_import.load()  # quiet, as the command lines import it
    reader = tf.train.load_checkpoint(os.path.join(folder, PREFIX))
    return {key: reader.get_tensor(key) for key in sorted(reader.get_variable_to_shape_map())
            if _is_model_variable(key)}


def compare(soaked: str, quiet: str) -> Dict[str, Any]:
    """The largest differences between two checkpoints' trainable weights and batch-norm moving statistics.

    docs/reliability.md promises the trainable weights bit for bit with dropout off; the moving statistics
    differ slightly after a resume (each rank keeps its own during an epoch; a resume starts from rank 0's).
    """
    import numpy as np

    a, b = model_variables(soaked), model_variables(quiet)
    if a.keys() != b.keys() or not a:
        return {"same_variables": False, "only_soaked": sorted(set(a) - set(b))[:5],
                "only_quiet": sorted(set(b) - set(a))[:5]}
    trainable = [k for k in a if "moving_" not in k]
    moving = [k for k in a if "moving_" in k]

    def worst(keys):
        """The largest absolute difference over ``keys`` (0 for none)."""
        return max((float(np.max(np.abs(a[k] - b[k]))) for k in keys), default=0.0)

    return {"same_variables": True, "trainable_variables": len(trainable),
            "trainable_max_abs_diff": worst(trainable), "moving_statistics_max_abs_diff": worst(moving)}
