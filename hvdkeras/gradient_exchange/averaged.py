"""Which variables' gradients were already averaged in the current step, so that no path averages twice.

A ``DistributedGradientTape`` averages when it computes the gradients; a distributed
optimizer averages when it applies them, unless they were averaged already. The two meet
when a script uses both (Horovod's examples do), and on Keras 2 inside Horovod's own
optimizer (``minimize`` averages in ``compute_gradients``, then calls ``apply_gradients``).
Whoever averages calls :func:`record`; whoever is about to apply asks :func:`averaged_keys`
and, once applied, calls :func:`clear`.

The record belongs to the step being traced: inside a ``tf.function`` it is kept per
traced function (a ``tf.cond`` branch, such as a ``LossScaleOptimizer``'s, sees the
record of the function around it); in eager execution it is kept with the averaged
tensors themselves, so that a gradient changed after averaging (clipped, say) or a
record left by a step that skipped its update (an overflow) is never taken as averaged.
"""
from __future__ import annotations

import re
import threading
import weakref
from typing import Any, Dict, Sequence, Set

import tensorflow as tf

from hvdkeras.runtime import compat

# The names TensorFlow gives the graphs of control flow: cond_v2's "<scope>cond_true_<uid>", switch_case's
# "<scope>case_branch<i>_<uid>", while_v2's "<scope>while_body_<uid>" and "<scope>while_cond_<uid>".
_COND_BRANCH = re.compile(r"(cond(_\d+)?_(true|false)|case(_\d+)?_branch\d*)_\d+$")
_LOOP = re.compile(r"while(_\d+)?_(body|cond)_\d+$")
_traced: "weakref.WeakKeyDictionary[Any, Set[Any]]" = weakref.WeakKeyDictionary()
_eager = threading.local()


def _control_flow_kind(graph) -> str:
    """"cond" for a ``tf.cond``/``tf.switch_case`` branch, "loop" for a ``tf.while_loop`` body or condition, else ""."""
    name = getattr(graph, "name", "") or ""
    if _COND_BRANCH.search(name):
        return "cond"
    if _LOOP.search(name):
        return "loop"
    return ""


def _step_graph():
    """The traced function around the current graph, through control flow (``None`` when executing eagerly)."""
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    while _control_flow_kind(graph) and hasattr(graph, "outer_graph"):
        graph = graph.outer_graph
    return graph


def _eager_record() -> Dict[Any, Any]:
    if not hasattr(_eager, "record"):
        _eager.record = {}
    return _eager.record


def record(variables: Sequence, grads: Sequence) -> None:
    """Notes that ``grads`` (one per variable) are averaged over ranks, in this step."""
    graph = _step_graph()
    pairs = [(compat.variable_key(v), g) for v, g in zip(variables, grads) if g is not None]
    if graph is None:
        _eager_record().update(pairs)
    else:
        _traced.setdefault(graph, set()).update(key for key, _ in pairs)


def averaged_keys(variables: Sequence, grads: Sequence) -> Set[Any]:
    """The keys of those ``variables`` whose gradient in ``grads`` was recorded as averaged in this step."""
    graph = _step_graph()
    if graph is None:
        seen = _eager_record()
        return {key for key, g in ((compat.variable_key(v), g) for v, g in zip(variables, grads))
                if g is not None and seen.get(key) is g}
    seen_traced = _traced.get(graph, set())
    return {key for key in (compat.variable_key(v) for v, g in zip(variables, grads) if g is not None)
            if key in seen_traced}


def clear(variables: Sequence) -> None:
    """Forgets ``variables``' record: their gradients have been applied."""
    keys = [compat.variable_key(v) for v in variables]
    graph = _step_graph()
    if graph is None:
        seen = _eager_record()
        for key in keys:
            seen.pop(key, None)
    elif graph in _traced:
        _traced[graph].difference_update(keys)


def inside_cond() -> bool:
    """Whether the current traced function is inside a ``tf.cond`` branch, where only some ranks may run an allreduce.

    Only the control flow of the innermost traced function counts: a function that is
    called inside a branch of another (Keras 3's step inside its ``steps_per_execution``
    loop) runs on every rank alike.
    """
    if tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    while True:
        kind = _control_flow_kind(graph)
        if kind == "cond":
            return True
        if not kind or not hasattr(graph, "outer_graph"):
            return False
        graph = graph.outer_graph


def refuse_inside_cond() -> None:
    """Raises, in one line, when gradients not averaged yet are to be averaged inside a ``tf.cond`` branch."""
    if inside_cond():
        raise RuntimeError(
            "a distributed optimizer was asked to average gradients inside a tf.cond branch (for example a "
            "LossScaleOptimizer wrapped around it on Keras 3); ranks that take different branches would wait in the "
            "allreduce forever. Average before branching: on Keras 3 pass the LossScaleOptimizer to "
            "DistributedOptimizer (hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(opt))), or average "
            "with hvd.DistributedGradientTape")
