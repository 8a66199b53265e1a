"""How much of each step's gradient exchange overlaps the backward pass, read from a Horovod timeline.

    python -m benchmarks.timeline_overlap runs/w/timeline.json [more.json ...] [--skip 2]

Horovod's timeline (``horovod.timeline`` in the config, written by rank 0) has, per tensor and for
every time it is reduced, a ``NEGOTIATE_ALLREDUCE`` span whose start is when rank 0 handed the tensor
to Horovod, then an ``ALLREDUCE`` span: ``B`` when Horovod starts reducing it (every rank has handed
it over; tensors fused into one exchange start together), ``E`` when it is done. The gradients are
the tensors reduced equally often, the largest such group (a per-batch scalar or a metric reduced a
different number of times is left out), and the ``k``-th time of each belongs to step ``k``. Per step:

* ``busy``: the time at least one gradient was being exchanged (the union of the ``ALLREDUCE`` spans);
* ``before``: the part of ``busy`` before rank 0 handed over its last gradient, i.e. while its backward
  pass was still producing gradients: the overlap;
* ``after``: the rest of ``busy``, which the step waits for after the backward pass: the exposed
  exchange. With no overlap at all, ``before`` is near zero and ``after`` is all of ``busy``.

The medians over the steps (after ``--skip`` warm-up steps) are printed per file.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict

ALLREDUCE = "ALLREDUCE"


def load_events(path: str) -> list[dict]:
    """The timeline's events; a file cut short by a killed job (no closing ``]``) is read up to its last event."""
    with open(path) as f:
        text = f.read().strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.rstrip(",\n") + "]")


def allreduce_spans(events: list[dict]) -> dict[str, list[tuple[float, float, float]]]:
    """``{tensor: [(handed_s, start_s, end_s), ...]}``: every ``ALLREDUCE`` of every tensor, in order, with the
    start of the negotiation before it (when rank 0 handed the tensor over)."""
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in e.get("args", {})}
    depth: dict[int, list[str]] = defaultdict(list)  # per tensor: the names of its open B events
    handed: dict[int, float] = {}
    opened: dict[int, float] = {}
    spans: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for e in events:
        pid, ph = e.get("pid"), e.get("ph")
        if pid not in names or ph not in ("B", "E"):
            continue
        if ph == "B":
            name = e.get("name", "")
            depth[pid].append(name)
            if name.startswith("NEGOTIATE_"):
                handed[pid] = e["ts"] / 1e6
            elif name == ALLREDUCE:
                opened[pid] = e["ts"] / 1e6
        elif depth[pid]:
            if depth[pid].pop() == ALLREDUCE and pid in opened:
                start = opened.pop(pid)
                spans[names[pid]].append((handed.pop(pid, start), start, e["ts"] / 1e6))
    return dict(spans)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def steps(spans: dict[str, list[tuple[float, float, float]]]) -> list[dict]:
    """One record per step: the ``k``-th span of each gradient (the largest group of tensors reduced equally often)."""
    if not spans:
        return []
    counts = Counter(len(v) for v in spans.values())
    times = max(counts, key=lambda n: (counts[n], n))
    tensors = [v for v in spans.values() if len(v) == times]
    out = []
    for k in range(times):
        step = [t[k] for t in tensors]
        last_handed = max(h for h, _, _ in step)
        busy = _union([(a, b) for _, a, b in step])
        before = sum(min(b, last_handed) - a for a, b in busy if a < last_handed)
        total = sum(b - a for a, b in busy)
        out.append({"tensors": len(step), "busy_s": total, "before_s": before, "after_s": total - before,
                    "start_s": min(h for h, _, _ in step)})
    return out


def summary(path: str, skip: int) -> dict:
    records = steps(allreduce_spans(load_events(path)))[skip:]
    if not records:
        raise SystemExit(f"no ALLREDUCE steps in {path} after skipping {skip}; was horovod.timeline set for a "
                         "training run? Received: " + path)
    med = {key: statistics.median(r[key] for r in records) for key in ("busy_s", "before_s", "after_s")}
    gaps = [b["start_s"] - a["start_s"] for a, b in zip(records, records[1:])]
    return dict(med, steps=len(records), tensors=records[0]["tensors"],
                step_s=statistics.median(gaps) if gaps else float("nan"),
                overlap=med["before_s"] / med["busy_s"] if med["busy_s"] else 0.0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.timeline_overlap", description=__doc__.split("\n")[0])
    parser.add_argument("timelines", nargs="+", help="Horovod timeline files (rank 0's)")
    parser.add_argument("--skip", type=int, default=2, help="warm-up steps to leave out (default 2)")
    args = parser.parse_args(argv)
    print(f"{'timeline':40} {'steps':>5} {'tensors':>7} {'step s':>7} {'busy s':>7} {'before s':>8}"
          f" {'after s':>8} {'overlap':>7}")
    for path in args.timelines:
        s = summary(path, args.skip)
        print(f"{path[-40:]:40} {s['steps']:5d} {s['tensors']:7d} {s['step_s']:7.3f} {s['busy_s']:7.3f}"
              f" {s['before_s']:8.3f} {s['after_s']:8.3f} {s['overlap']:7.2f}")

if __name__ == "__main__":
    main()
