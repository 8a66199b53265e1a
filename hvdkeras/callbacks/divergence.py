"""Ranks that train apart: every rank compares its trainable weights at every epoch end and before every checkpoint.

Rank 0's weights reach every rank once, when training starts; from then on every rank
applies the same averaged gradient, so the weights stay bitwise equal. A rank that
trains on its own goes unseen: its metrics are averaged with the others' and rank 0's
checkpoints look fine. :func:`check` finds it. It is a collective: every rank calls it
at the same point of training, and it

1. fingerprints each trainable variable that is not local (below): its values' bit
   patterns as unsigned 32-bit integers (a 64-bit value as two, a 16-bit one widened),
   in blocks of up to 1024 consecutive values; per variable the sum of every pattern and
   the sum of each block's sum weighted by the block's position, both modulo 2**32.
   Integer arithmetic, so nothing is rounded: a change of any single value, by as
   little as its last bit, always changes the first number; values moved to other
   blocks change the second. One pass over the weights, where they live, in one traced
   TensorFlow function;
2. gathers every rank's two numbers per variable in one allgather;
3. on a difference, raises the same :class:`~hvdkeras.common.errors.DivergenceError` on every
   rank, one line naming the first differing variable, the ranks and the likely causes.

Bitwise equality is the test: every rank applies the same averaged gradient to the
same weights with the same elementwise arithmetic, so there is no legitimate drift to
tolerate; fp16 compression averages fp16 gradients, the same on every rank. What does
drift legitimately is local, and left out: the variables a distributed optimizer keeps
local (``PartialDistributedOptimizer(local_layers=...)``, ``register_local_var``) and
those registered with :class:`~hvdkeras.callbacks.BroadcastGlobalVariablesCallback`
(``local_variables``, ``register_local_var``), or passed to :func:`exclude`.

A check runs at most once per optimizer step: the guard, the broadcast callback and a
checkpoint writer at one epoch end compare once, the first of them; the others return
at once, on every rank alike (every rank has taken the same steps). :func:`start`
forgets the last check; every callback that checks calls it when ``fit`` starts.
"""
from __future__ import annotations

import weakref
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from hvdkeras.common.errors import DivergenceError
from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras

tf = compat.tf

BLOCK = 1024  # values per block of the position-weighted sum (a power of two; fewer when a size is no multiple)

LIKELY_CAUSES = (
    "a custom train_step whose apply_gradients bypasses the distributed optimizer (Keras 2), an optimizer not"
    " wrapped in DistributedOptimizer, layers or randomness that depend on the rank, or a variable each rank keeps"
    " as its own but never registered local (BroadcastGlobalVariablesCallback(local_variables=...),"
    " PartialDistributedOptimizer(local_layers=...))"
)
TURN_OFF = "trainer.check_divergence=false, or check_divergence=False in the callbacks"


# --------------------------------------------------------------------------- the fingerprint


def _blocks(variable) -> Tuple[int, int]:
    """(blocks, values per block) of the variable's 32-bit patterns."""
    dtype = compat.dtype(variable)
    count = int(np.prod(variable.shape)) * max(1, dtype.size // 4)
    width = BLOCK
    while count % width:
        width //= 2
    return count // width, width


def _bit_patterns(variable):
    """The variable's values as unsigned 32-bit patterns (a tensor, traced)."""
    dtype = compat.dtype(variable)
    if dtype == tf.bool:
        return tf.cast(variable, tf.uint32)
    if dtype.size >= 4:
        return tf.bitcast(variable, tf.uint32)  # 8 bytes: a trailing axis of two
    return tf.cast(tf.bitcast(variable, tf.uint16 if dtype.size == 2 else tf.uint8), tf.uint32)


class Fingerprint:
    """The traced function fingerprinting one list of variables: ``[variables, 2]`` unsigned 32-bit sums."""

    def __init__(self, variables: Sequence):
        self.keys = tuple(compat.variable_key(v) for v in variables)
        tf_variables = compat.tf_variables(variables)
        shapes = [_blocks(v) for v in tf_variables]
        rows = [r for r, _ in shapes]
        # each block's variable and its position (from 1) within it: inputs, so the trace stays small
        self._segments = tf.constant(np.repeat(np.arange(len(rows), dtype=np.int32), rows))
        self._positions = tf.constant(np.concatenate([np.arange(1, r + 1, dtype=np.uint32) for r in rows]
                                                     or [np.zeros(0, np.uint32)]))
        count = len(tf_variables)

        def fingerprint(segments, positions):
            sums = [tf.reduce_sum(tf.reshape(_bit_patterns(v), shape), axis=1)
                    for v, shape in zip(tf_variables, shapes)]
            blocks = tf.concat(sums, 0)
            total = tf.math.unsorted_segment_sum(blocks, segments, count)
            weighted = tf.math.unsorted_segment_sum(blocks * positions, segments, count)
            return tf.stack([total, weighted], axis=1)

        # traced now, and called as the concrete function: no dispatch on the arguments at each check
        self._function = (tf.function(fingerprint, autograph=False).get_concrete_function(
            self._segments, self._positions) if count else None)

    def __call__(self) -> np.ndarray:
        """Returns the fingerprint of the variables' current values, one ``[sum, weighted sum]`` row per variable."""
        if self._function is None:
            return np.zeros((0, 2))
        return self._function(self._segments, self._positions).numpy().astype(np.float64)


# --------------------------------------------------------------------------- what is compared, and when


class _State:
    """Per model: the variables registered local, the last check's step, the variables compared in this ``fit``
    (Keras takes the trainable variables once per ``fit`` too) and the traced fingerprint."""

    def __init__(self) -> None:
        self.local_keys: set = set()
        self.checked_at: Optional[Tuple[int, int]] = None
        self.variables: Optional[List] = None
        self.fingerprint: Optional[Fingerprint] = None


_states: "weakref.WeakKeyDictionary[Any, _State]" = weakref.WeakKeyDictionary()


def _state(model) -> _State:
    return _states.setdefault(model, _State())


def exclude(model, variables: Iterable) -> None:
    """Leaves ``variables`` (variables or :func:`hvdkeras.runtime.compat.variable_key` keys) out of ``model``'s checks:
    values each rank keeps as its own."""
    state = _state(model)
    state.local_keys |= {v if not hasattr(v, "assign") else compat.variable_key(v) for v in variables}
    state.variables = None


def start(model) -> None:
    """Forgets the last check and the variables compared (a new ``fit``: the step count may have been restored
    or reset, layers frozen or unfrozen). Every rank."""
    state = _state(model)
    state.checked_at = state.variables = None


def optimizer_local_keys(optimizer) -> set:
    """Keys of the variables a distributed optimizer keeps local (never averaged), wrappers included.

    Horovod's Keras ``DistributedOptimizer`` (Keras 2) records them in ``_local_vars`` (of its
    gradient aggregation helper with ``backward_passes_per_step > 1``); hvdkeras's Keras 3
    exchange in ``_hvd_local`` and ``_hvd_local_layers``; a ``LossScaleOptimizer`` wraps either.
    """
    keys: set = set()
    seen = set()
    while optimizer is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        keys |= set(getattr(optimizer, "_local_vars", None) or ())
        keys |= set(getattr(getattr(optimizer, "_agg_helper", None), "_local_vars", None) or ())
        keys |= set(getattr(optimizer, "_hvd_local", None) or ())
        for layer in getattr(optimizer, "_hvd_local_layers", None) or ():
            keys |= {compat.variable_key(v) for v in layer.trainable_weights}
        optimizer = getattr(optimizer, "inner_optimizer", None)
    return keys


def compared_variables(model) -> List:
    """The trainable variables :func:`check` compares: all but the local ones."""
    local = _state(model).local_keys | optimizer_local_keys(getattr(model, "optimizer", None))
    return [v for v in model.trainable_variables if compat.variable_key(v) not in local]


def variable_name(variable) -> str:
    """The name the error line gives: Keras 3's path (``sequential/dense/kernel``), else the variable's name."""
    return getattr(variable, "path", None) or variable.name


def _step(model) -> Optional[int]:
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    return None if iterations is None else int(iterations.numpy())


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]} differs" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))} differ"


def compare(model, where: str) -> None:
    """Collective, every time it is called: raises :class:`DivergenceError` on every rank if any rank's
    compared weights differ from rank 0's. ``where`` completes "... differ between ranks <where>".
    One process compares nothing."""
    if distributed.size() == 1:
        return
    state = _state(model)
    if state.variables is None:
        state.variables = compared_variables(model)
        keys = tuple(compat.variable_key(v) for v in state.variables)
        if state.fingerprint is None or state.fingerprint.keys != keys:
            state.fingerprint = Fingerprint(state.variables)
    variables, fingerprint = state.variables, state.fingerprint
    assert fingerprint is not None  # made with the variables it compares
    everyone = distributed.allgather_array(fingerprint().reshape(-1),
                                           name=distributed.cycled_name("hvdkeras.divergence"))
    differs = np.any(everyone != everyone[0], axis=0).reshape(-1, 2).any(axis=1)  # per variable
    if not differs.any():
        return
    first = int(np.argmax(differs))
    ranks = [r for r in range(1, len(everyone)) if np.any(everyone[r, 2 * first:2 * first + 2]
                                                          != everyone[0, 2 * first:2 * first + 2])]
    step = _step(model)
    raise DivergenceError(
        f"trainable weights differ between ranks {where}{'' if step is None else f' (step {step})'}:"
        f" {variable_name(variables[first])} is the first of {int(differs.sum())} differing variables"
        f" ({_ranks(ranks)} from rank 0); the ranks are training apart, likely because of {LIKELY_CAUSES};"
        f" nothing is saved from these weights (to turn this check off: {TURN_OFF})")


def check(model, where: str) -> bool:
    """:func:`compare`, unless this model was already compared at this optimizer step; True if it compared.

    Collective: every rank calls it at the same point; every rank skips alike.
    """
    state = _state(model)
    optimizer = getattr(model, "optimizer", None)
    step = _step(model)
    at = None if step is None else (id(optimizer), step)
    if at is not None and state.checked_at == at:
        return False
    compare(model, where)
    state.checked_at = at
    return True


# --------------------------------------------------------------------------- the callback


class DivergenceGuard(keras.callbacks.Callback):
    """Stops every rank, with one line, when the ranks' trainable weights differ at an epoch end.

    Rule enforced: at the end of every epoch the ranks compare a fingerprint of their
    trainable weights (:func:`check`: one pass over the weights and one allgather of two
    numbers per variable); a difference raises the same
    :class:`~hvdkeras.common.errors.DivergenceError` on every rank, naming the first differing
    variable and the likely causes, before any later callback saves those weights.
    hvdkeras' checkpoint writers (:class:`~hvdkeras.callbacks.BackupAndRestore`,
    :class:`~hvdkeras.callbacks.ModelCheckpoint`) run the same check before they write,
    and :class:`~hvdkeras.callbacks.BroadcastGlobalVariablesCallback` at every epoch
    end; in one list they compare once per step.

    ``local_variables``: variables each rank keeps as its own, left out (as well as those
    the distributed optimizer or the broadcast callback already keeps local).

    Args:
        local_variables: a variable, or a list of them, that each rank keeps as its own: not compared.
    """

    def __init__(self, local_variables=None):
        super().__init__()
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        self.local_variables = list(local_variables)

    def on_train_begin(self, logs=None):
        """Prepares the model's comparison, leaving out ``local_variables``."""
        start(self.model)
        exclude(self.model, self.local_variables)

    def on_epoch_end(self, epoch, logs=None):
        """Compares the ranks' trainable weights; a difference stops every rank."""
        check(self.model, f"at the end of epoch {epoch + 1}")
