"""hvdkeras.gradient_exchange.allreduce in one process: the order and grouping of the requests, what is skipped."""
import tensorflow as tf

from hvdkeras.gradient_exchange import allreduce
from hvdkeras.gradient_exchange.allreduce import split_groups


def _issued(monkeypatch):
    issued = []
    monkeypatch.setattr(allreduce.hvd, "allreduce", lambda t, name, **kw: issued.append(name) or t)
    return issued


def test_requests_are_issued_in_backward_order(hvd_single, monkeypatch):
    issued = _issued(monkeypatch)
    grads = [tf.ones(2), None, tf.ones(3), tf.ones(1)]
    out = allreduce.allreduce_gradients(grads)
    assert issued == ["hvdkeras.grad.3", "hvdkeras.grad.2", "hvdkeras.grad.0"]
    assert out[1] is None and [o.shape[0] for o in (out[0], out[2], out[3])] == [2, 3, 1]


def test_gradients_already_averaged_are_returned_as_they_are(hvd_single, monkeypatch):
    issued = _issued(monkeypatch)
    variables = [tf.Variable(tf.zeros(2)), tf.Variable(tf.zeros(3))]
    grads = [tf.ones(2), tf.ones(3)]
    out = allreduce.allreduce_gradients(grads, variables, skip={allreduce.keys_of(variables, 2)[0]})
    assert issued == ["hvdkeras.grad.1"]
    assert out[0] is grads[0]


def test_split_groups_follows_horovods_rule():
    assert split_groups(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert split_groups(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_groups([1, 2], 5) == [[1], [2]]  # never an empty request


def test_a_steps_gradients_are_released_together_so_its_updates_run_all_or_none():
    @tf.function
    def step(a, b):
        sparse = tf.IndexedSlices(b * 3.0, tf.constant([0]), tf.constant([3]))
        return allreduce.released_together([a * 2.0, None, sparse])

    graph = step.get_concrete_function(tf.TensorSpec([2]), tf.TensorSpec([1])).graph
    producers = {op.name for op in graph.get_operations() if op.type == "Mul"}
    assert len(producers) == 2
    released = [op for op in graph.get_operations() if op.type == "Identity" and op.control_inputs]
    assert len(released) == 3  # the dense gradient, the sparse one's values and its indices
    for op in released:  # each waits for every gradient, not just its own (its own as its input)
        assert producers <= {c.name for c in op.control_inputs} | {t.op.name for t in op.inputs}
    dense, none, sparse = step(tf.constant([1.0, 2.0]), tf.constant([1.0]))
    assert none is None and dense.numpy().tolist() == [2.0, 4.0] and sparse.values.numpy().tolist() == [3.0]
    eager = [tf.constant(1.0), None]
    assert allreduce.released_together(eager)[0] is eager[0]  # eagerly every allreduce has returned


def _waits_for(op) -> set:
    """The names of every op ``op`` waits for, through its inputs and control edges."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for before in [t.op for t in current.inputs] + list(current.control_inputs):
            if before.name not in seen:
                seen.add(before.name)
                stack.append(before)
    return seen


def test_what_an_optimizer_changes_without_reading_a_gradient_waits_for_every_gradient():
    counter = tf.Variable(0)

    @tf.function
    def step(a, b):
        grads = [a * 2.0, None, tf.IndexedSlices(b * 3.0, tf.constant([0]), tf.constant([3]))]
        with allreduce.applied_after(grads):
            counter.assign_add(1)  # reads no gradient, like the optimizer's step counter

    graph = step.get_concrete_function(tf.TensorSpec([2]), tf.TensorSpec([1])).graph
    producers = {op.name for op in graph.get_operations() if op.type == "Mul"}
    (update,) = [op for op in graph.get_operations() if op.type == "AssignAddVariableOp"]
    assert producers <= _waits_for(update)
    with allreduce.applied_after([tf.constant(1.0)]):  # eagerly: nothing to wait for
        counter.assign_add(1)
    assert int(counter.numpy()) == 1
