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
