"""benchmarks.timeline_overlap: the overlap of each step's exchange with the backward pass, from a Horovod timeline."""
import json

import pytest

from benchmarks import timeline_overlap


def _timeline(path, steps, cut=False):
    """A timeline as Horovod writes it: tensors as processes; per reduction a negotiation whose start is when
    rank 0 handed the tensor over, then an ALLREDUCE span with a nested activity.

    ``steps``: per step, ``{tensor: (handed_s, start_s, end_s)}`` (or ``(start_s, end_s)``: handed at the start).
    """
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": 1}}]
    pids = {}
    us = lambda t: int(round(t * 1e6))  # noqa: E731
    for step in steps:
        for name, times in step.items():
            h, a, b = times if len(times) == 3 else (times[0], *times)
            if name not in pids:
                pids[name] = len(pids) + 1
                events.append({"name": "process_name", "ph": "M", "pid": pids[name], "args": {"name": name}})
            pid = pids[name]
            events += [{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": us(h), "pid": pid},
                       {"ph": "X", "name": "1", "ts": us(h) + 1, "pid": pid, "dur": 0},
                       {"ph": "E", "ts": us(a) - 1, "pid": pid},
                       {"ph": "B", "name": "ALLREDUCE", "ts": us(a), "pid": pid},
                       {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": us(a) + 1, "pid": pid},
                       {"ph": "E", "ts": us(b) - 1, "pid": pid},
                       {"ph": "E", "ts": us(b), "pid": pid}]
    events.sort(key=lambda e: e.get("ts", -1))
    text = json.dumps(events)
    path.write_text(text[:-1] + "," if cut else text)  # a killed job leaves no closing bracket
    return str(path)


def test_an_exchange_during_the_backward_pass_counts_as_overlap(tmp_path):
    # three gradients handed over as the backward pass makes them, 0.1 s of exchange each, the last at 0.5 s
    overlapped = [{"g3": (t + 0.1, t + 0.2), "g2": (t + 0.3, t + 0.4), "g1": (t + 0.5, t + 0.6)} for t in (0, 1, 2)]
    s = timeline_overlap.summary(_timeline(tmp_path / "a.json", overlapped), skip=0)
    assert s["steps"] == 3 and s["tensors"] == 3 and s["step_s"] == pytest.approx(1.0)
    assert s["busy_s"] == pytest.approx(0.3) and s["before_s"] == pytest.approx(0.2)
    assert s["after_s"] == pytest.approx(0.1) and s["overlap"] == pytest.approx(2 / 3)


def test_gradients_that_all_start_after_the_backward_pass_do_not_overlap(tmp_path):
    # all three handed over together at the end (fused): nothing is exchanged while gradients are computed
    late = [{"g3": (t + 0.5, t + 0.8), "g2": (t + 0.5, t + 0.8), "g1": (t + 0.5, t + 0.8)} for t in (0, 1, 2)]
    s = timeline_overlap.summary(_timeline(tmp_path / "b.json", late, cut=True), skip=1)
    assert s["steps"] == 2 and s["overlap"] == 0 and s["after_s"] == pytest.approx(0.3)


def test_an_exchange_queued_behind_earlier_ones_is_exposed_after_the_backward_pass(tmp_path):
    # handed over early (0.1, 0.2, 0.3 s) but the wire takes 0.3 s each: what runs after 0.3 s is waited for
    queued = [{"g3": (t + 0.1, t + 0.1, t + 0.4), "g2": (t + 0.2, t + 0.4, t + 0.7), "g1": (t + 0.3, t + 0.7, t + 1.0)}
              for t in (0, 2)]
    s = timeline_overlap.summary(_timeline(tmp_path / "q.json", queued), skip=0)
    assert s["busy_s"] == pytest.approx(0.9) and s["before_s"] == pytest.approx(0.2)
    assert s["after_s"] == pytest.approx(0.7)


@pytest.mark.parametrize("check_times", [1, 3])
def test_a_tensor_reduced_more_or_less_often_than_the_gradients_is_left_out(tmp_path, check_times):
    steps = [{"g1": (t, t + 0.1), "g2": (t + 0.2, t + 0.3)} for t in (0, 1)] + [{} for _ in range(check_times - 2)]
    for k in range(check_times):  # a per-batch scalar, also reduced in the warm-up or not every step
        steps[k]["loss_check"] = (k + 0.9, k + 0.91)
    s = timeline_overlap.summary(_timeline(tmp_path / "c.json", steps), skip=0)
    assert s["tensors"] == 2 and s["steps"] == 2


def test_a_timeline_without_allreduce_steps_is_one_line(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("[]")
    with pytest.raises(SystemExit, match="no ALLREDUCE steps in .*empty.json"):
        timeline_overlap.summary(str(path), skip=0)
