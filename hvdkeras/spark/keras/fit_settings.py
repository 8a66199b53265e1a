"""A KerasEstimator's parameters, checked once before anything is written, as the ranks' config and the retries.

Each check reads a parameter through ``get`` (the estimator's ``getOrDefault``) and refuses a value it cannot take
in one line naming the parameter: :func:`whole`, :func:`flag`, :func:`compression`, :func:`max_retries`;
:class:`Checked` holds the fit's settings: the config the trainer on each rank is built from
(:func:`config_tree`, whose bounds :func:`hvdkeras.config.from_dict` checks) and how often the gang may start again.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

import numpy as np

from hvdkeras import config as config_lib
from hvdkeras.common.errors import SetupError, shown
from hvdkeras.runtime import compat

Get = Callable[[str], Any]
FLAGS = ("shuffle", "use_gpu", "inmemory_cache_all", "allow_nan", "keep_intermediate_data")


@dataclasses.dataclass(frozen=True)
class Checked:
    """A fit's parameters as checked once, before anything is written: the trainer's config and the retries."""

    config: Dict[str, Any]
    max_retries: int


def whole(get: Get, name: str, minimum: int, optional: bool = False) -> Optional[int]:
    """Parameter ``name`` as a whole number of at least ``minimum`` (None when ``optional`` and unset); else a
    SetupError in one line naming it."""
    value = get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise SetupError(f"{name} must be a whole number of at least {minimum}"
                         f"{' or None' if optional else ''} (Received: {name}={shown(value)})")
    return int(value)


def flag(get: Get, name: str) -> bool:
    """Parameter ``name`` as True or False; else a SetupError in one line naming it."""
    value = get(name)
    if not isinstance(value, (bool, np.bool_)):
        raise SetupError(f"{name} must be True or False (Received: {name}={shown(value)})")
    return bool(value)


def max_retries(get: Get) -> int:
    """``max_retries``: how often the gang may start again, a whole number of at least 0."""
    retries = get("max_retries")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise SetupError(f"max_retries must be a whole number of at least 0 (Received: max_retries={retries!r})")
    return retries


def compression(get: Get) -> str:
    """The trainer's name for ``gradient_compression``, read from Horovod's ``Compression`` object itself."""
    from horovod.tensorflow.compression import Compression

    value = get("gradient_compression")
    if value is None or value in ("fp16", "none"):
        return str(value or "none")
    for name in ("fp16", "none"):
        if value is getattr(Compression, name):
            return name
    raise SetupError("gradient_compression must be Horovod's Compression.fp16 or Compression.none (Received:"
                     f" gradient_compression={value!r})")


def config_tree(get: Get, num_proc: int, optimizer: Any, compression_name: str) -> Dict[str, Any]:
    """The ranks' config as a dict, checked (:func:`hvdkeras.config.from_dict`): a parameter that is not a whole
    number where one is needed, or past the config's bounds, is one line here, before anything is written.
    ``compression_name`` is :func:`compression`'s, checked already."""
    batch = whole(get, "batch_size", 1) or 1  # never None: not optional
    val_batch = whole(get, "val_batch_size", 1, optional=True) or batch
    seed = whole(get, "random_seed", 0, optional=True)
    for name in FLAGS:
        flag(get, name)
    tree = {
        "data": {"name": "spark", "global_batch_size": None, "per_rank_batch_size": batch,
                 "eval_global_batch_size": val_batch * num_proc},
        # Horovod's rule: one rank's rate x the ranks (the global batch over one rank's batch).
        "optimizer": {"learning_rate": compat.get_learning_rate(optimizer), "lr_scaling": "ranks"},
        "trainer": {"epochs": whole(get, "epochs", 1),
                    "verbose": min(2, whole(get, "verbose", 0) or 0),
                    "steps_per_epoch": whole(get, "train_steps_per_epoch", 1, optional=True), "export": False},
        "checkpoint": {"keep": 2},
        "horovod": {"compression": compression_name,
                    "backward_passes_per_step": whole(get, "backward_passes_per_step", 1)},
        "runtime": {"seed": 42 if seed is None else seed},
    }
    config_lib.from_dict(tree, source="the estimator's parameters")  # bounds and types: a ConfigError, one line
    return tree
