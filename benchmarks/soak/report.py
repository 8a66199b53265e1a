"""The soak's report: per kind and per fault, as text and as JSON (no TensorFlow)."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

from benchmarks.soak.records import Attempt, Outcome


def by_kind(outs: List[Outcome]) -> Dict[str, Dict[str, Any]]:
    """Per fault kind: injected, survived (promise held, no hang), batches lost, wall time lost."""
    table: Dict[str, Dict[str, Any]] = {}
    for out in outs:
        if not out.fault.injected:
            continue
        row = table.setdefault(out.fault.kind, {"injected": 0, "survived": 0, "batches_lost": 0,
                                                "wall_lost_s": 0.0, "restarts": 0})
        row["injected"] += 1
        row["survived"] += int(out.held and not out.hang)
        row["batches_lost"] += out.lost or 0
        if out.wall_lost_s is None and out.ended_attempt:
            row["wall_lost_s"] = None  # not measured (a Spark fit's lines come late): not claimed as nothing
        elif row["wall_lost_s"] is not None:
            row["wall_lost_s"] = round(row["wall_lost_s"] + (out.wall_lost_s or 0.0), 2)
        row["restarts"] += int(out.ended_attempt)
    return dict(sorted(table.items()))


def _fault_row(out: Outcome) -> Dict[str, Any]:
    row = dataclasses.asdict(out.fault)
    row.update({k: v for k, v in dataclasses.asdict(out).items() if k != "fault"})
    return row


def build(outs: List[Outcome], attempts: List[Attempt], settings: Dict[str, Any], steps: int,
          final: Optional[Dict[str, Any]] = None, unprompted: List[Attempt] = (),
          foreign_damage: List[str] = (), lost_checkpoints: List[str] = ()) -> Dict[str, Any]:
    """The report as one JSON-ready dict."""
    injected = [out for out in outs if out.fault.injected]
    survived = sum(out.held and not out.hang for out in injected)
    return {
        "settings": settings,
        "steps_per_epoch": steps,
        "faults": len(injected),
        "not_injected": len(outs) - len(injected),
        "survived": survived,
        "hangs": sum(a.hang for a in attempts),
        "by_kind": by_kind(outs),
        "per_fault": [_fault_row(out) for out in outs],
        "attempts": [{"index": a.index, "start": round(a.start, 2), "end": round(a.end, 2), "status": a.status,
                      "hang": a.hang, "resumed": a.said.resumed, "preempted": a.said.preempted,
                      "errors": a.said.errors, "damaged": a.said.damaged, "expected_next": a.expected_next,
                      "left_behind": a.left_behind} for a in attempts],
        "left_behind": [p for a in attempts for p in a.left_behind],
        "unprompted_failures": [{"attempt": a.index, "status": a.status, "errors": a.said.errors}
                                for a in unprompted],
        "damage_not_injected": list(foreign_damage),
        "checkpoints_lost": list(lost_checkpoints),
        "final": final or {},
    }


def _position(batches: Optional[int], steps: int, exact: bool = True) -> str:
    if batches is None:
        return "-"
    epoch, batch = divmod(batches, steps)
    return ("" if exact else "~") + f"{epoch}:{batch}"


def text(report: Dict[str, Any]) -> str:
    """The report as a text table: by kind, per fault, then what failed and the comparison with a quiet run."""
    steps = report["steps_per_epoch"]
    missed = f" ({report['not_injected']} more due found nothing to hit)" if report.get("not_injected") else ""
    lines = [f"faults injected: {report['faults']}{missed}; survived (promise held, no hang): {report['survived']};"
             f" hangs: {report['hangs']}; attempts: {len(report['attempts'])}", "",
             f"{'kind':<18} {'injected':>8} {'survived':>8} {'restarts':>8} {'batches lost':>12} {'wall lost s':>11}"]
    for kind, row in report["by_kind"].items():
        lines.append(f"{kind:<18} {row['injected']:>8} {row['survived']:>8} {row['restarts']:>8}"
                     f" {row['batches_lost']:>12}"
                     f" {'-' if row['wall_lost_s'] is None else format(row['wall_lost_s'], '.1f'):>11}")
    lines += ["", "positions are epoch:batch (epochs done, batches of the next); ~ estimated from metrics.jsonl",
              f"{'#':>3} {'kind':<18} {'at s':>7} {'try':>3} {'phase':<8} {'at pos':>7} {'resumed':>7}"
              f" {'promised':>8} {'lost':>5} {'allowed':>7} {'wall s':>7}  held  note"]
    for row in report["per_fault"]:
        lines.append(
            f"{row['index']:>3} {row['kind']:<18} {row['at']:>7.1f} {row['attempt']:>3} {row['phase']:<8}"
            f" {_position(row['position'], steps, row['exact']):>7} {_position(row['resumed'], steps):>7}"
            f" {_position(row['promised'], steps):>8} {'-' if row['lost'] is None else row['lost']:>5}"
            f" {'-' if row['allowed'] is None else row['allowed']:>7}"
            f" {'-' if row['wall_lost_s'] is None else format(row['wall_lost_s'], '.1f'):>7}"
            f"  {'yes ' if row['held'] else 'NO  '}  {'; '.join(t for t in (row['detail'], row['note']) if t)}")
    for label, key in (("processes left behind", "left_behind"), ("failures with no fault", "unprompted_failures"),
                       ("checkpoints found damaged that the soak did not damage", "damage_not_injected"),
                       ("checkpoints lost (gone, neither pruned nor set aside as damaged)", "checkpoints_lost")):
        if report[key]:
            lines += ["", f"{label}:", *[f"  {item}" for item in report[key]]]
    final = report["final"]
    if final:
        against = ", against a quiet run of the same seed" if "quiet_val_accuracy" in final else ""
        lines += ["", f"final{against}: {final.get('verdict', '')}"]
        lines += [f"  {key}: {value}" for key, value in final.items() if key != "verdict"]
    return "\n".join(lines)
