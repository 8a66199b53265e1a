"""A picture of a run: ``python -m hvdkeras.report <workdir> [--out FILE] [--title TEXT]``.

Reads ``<workdir>/metrics.jsonl`` (one JSON line per epoch, written by rank 0,
see :class:`hvdkeras.callbacks.JsonlMetricsLogger`) and draws, by epoch: loss
(train and validation; for a model with several outputs the total and each
output's, ``<output>_loss``), accuracy (train and validation; each output's
``<output>_..accuracy`` too), the learning rate, and the throughput in the task's own
unit (``<unit>_per_sec``: images for the built-in image tasks, examples for your own
data; all ranks, and per rank when there is more than one). The PNG goes to ``<workdir>/report.png``
unless ``--out`` says otherwise.

Rules: when an epoch appears more than once (a job that ran it again, e.g. after
an elastic restart, or files joined by hand) its last record wins; a metric that
was never recorded leaves its panel saying so; a line that is not a JSON object
(a write cut short by a crash) is skipped with a note. A missing or empty file
stops with one line naming it and how to produce it (exit status 2).

Only matplotlib (Agg backend) is needed: no TensorFlow, so it runs anywhere the
file is copied to.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from absl import flags

from hvdkeras.common import command_line, log
from hvdkeras.common.errors import ReportError
from hvdkeras.common.workdir import METRICS_FILE, REPORT_FILE, atomic_save, read_metrics_counting

# (panel title, y label, [(record key, legend label, style)]); the throughput panel is the task's (throughput_panel).
PANELS: Tuple[Tuple[str, str, Tuple[Tuple[str, str, str], ...]], ...] = (
    ("Loss", "loss", (("loss", "train", "-"), ("val_loss", "validation", "--"))),
    ("Accuracy", "accuracy", (("accuracy", "train", "-"), ("val_accuracy", "validation", "--"))),
    ("Learning rate", "learning rate (end of epoch)", (("lr", "lr", "-"),)),
)
DEFAULT_UNIT = "images"  # the built-in tasks'; what the throughput panel names when the records hold no rate
USAGE = "python -m hvdkeras.report <workdir> [--out FILE] [--title TEXT]"
# The command's own flags (hvdkeras.common.command_line): importing the library adds none to its program's.
FLAGS = command_line.flag_values()
flags.DEFINE_string("out", None, "PNG to write (default: <workdir>/report.png)", flag_values=FLAGS)
flags.DEFINE_string("title", None, "heading of the picture (default: the workdir's name)", flag_values=FLAGS)
# absl has no positional arguments: the one argument, as the reference (tools/reference_docs.py) shows it.
ARGUMENTS = (("workdir", "a training workdir holding metrics.jsonl (or the metrics.jsonl file itself)"),)
_RATE = re.compile(r"^(?!val_)([a-z][a-z0-9_]*?)_per_sec$")


def throughput_unit(records: Sequence[Dict[str, Any]]) -> str:
    """The unit the records' throughput is counted in: ``<unit>`` of the first ``<unit>_per_sec`` key with a
    number (the task's, :class:`hvdkeras.callbacks.ThroughputLogger`), else ``images``."""
    for record in records:
        for key, value in record.items():
            found = _RATE.match(key)
            if found and _number(value) is not None:
                return found.group(1)
    return DEFAULT_UNIT


def throughput_panel(unit: str) -> Tuple[str, str, Tuple[Tuple[str, str, str], ...]]:
    """The throughput panel for ``unit``: all ranks' rate and each rank's."""
    return (f"{unit.replace('_', ' ').capitalize()} per second", f"{unit}/s (training only)",
            ((f"{unit}_per_sec", "all ranks", "-"), (f"{unit}_per_sec_per_rank", "per rank", "--")))


def _per_output(records: Sequence[Dict[str, Any]], suffix: str, exclude: str) -> List[str]:
    """The training keys ending in ``suffix`` other than ``exclude`` that the records hold, for training or for
    validation (``buy_loss`` for ``buy_loss`` or ``val_buy_loss``), sorted."""
    keys = set()
    for record in records:
        for key, value in record.items():
            base = key[len("val_"):] if key.startswith("val_") else key
            if base.endswith(suffix) and base != exclude and _number(value) is not None:
                keys.add(base)
    return sorted(keys)


def panel_lines(records: Sequence[Dict[str, Any]]) -> List[Tuple[str, str, Tuple[Tuple[str, str, str, str], ...]]]:
    """``PANELS`` for these records, each line ``(record key, legend label, style, colour)``: the loss panel
    gains each output's loss (``buy_loss``, ``val_buy_loss``) beside the total, the accuracy panel each
    output's accuracy (``buy_accuracy``, ``buy_binary_accuracy``...); train and validation of one key share
    a colour."""
    panels = []
    for panel, ylabel, lines in PANELS + (throughput_panel(throughput_unit(records)),):
        drawn = [(key, label, style, f"C{i // 2}" if panel in ("Loss", "Accuracy") else f"C{i}")
                 for i, (key, label, style) in enumerate(lines)]
        extra = {"Loss": ("_loss", "loss"), "Accuracy": ("accuracy", "accuracy")}.get(panel)
        if extra:
            outputs = _per_output(records, *extra)
            if outputs and panel == "Loss":
                drawn = [(key, f"total, {label}", style, colour) for key, label, style, colour in drawn]
            for i, key in enumerate(outputs, start=1):
                name = key[:-len("_loss")] if panel == "Loss" else key
                drawn += [(key, f"{name}, train", "-", f"C{i}"), (f"val_{key}", f"{name}, validation", "--", f"C{i}")]
        panels.append((panel, ylabel, tuple(drawn)))
    return panels


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def last_per_epoch(records: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One record per epoch, the last one seen for each, ordered by epoch.

    Records without an integer ``epoch`` are dropped.
    """
    by_epoch: Dict[int, Dict[str, Any]] = {}
    for record in records:
        epoch = record.get("epoch") if isinstance(record, dict) else None
        if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or epoch != int(epoch):
            continue
        by_epoch[int(epoch)] = record
    return [by_epoch[e] for e in sorted(by_epoch)]


def read_records(path: str, workdir: Optional[str] = None) -> List[Dict[str, Any]]:
    """The records of ``path`` (a ``metrics.jsonl``); raises :class:`ReportError` if there are none."""
    workdir = workdir or os.path.dirname(path) or "."
    how = (f"rank 0 writes it while training, e.g. python -m hvdkeras.train --config configs/digits.yaml"
           f" --workdir {workdir}")
    if not os.path.exists(path):
        raise ReportError(f"{path} does not exist; {how}")
    records, skipped = read_metrics_counting(path)
    if skipped:
        log.warning(f"skipped {skipped} line(s) of {path} that are not JSON objects")
    if not last_per_epoch(records):
        raise ReportError(f"{path} holds no epoch records; {how}")
    return records


def _series(records: Sequence[Dict[str, Any]], key: str) -> Tuple[List[int], List[float]]:
    epochs, values = [], []
    for record in records:
        value = _number(record.get(key))
        if value is not None:
            epochs.append(int(record["epoch"]))
            values.append(value)
    return epochs, values


def _last_finite(values: Sequence[float]) -> Optional[float]:
    for value in reversed(values):
        if math.isfinite(value):
            return value
    return None


def _fmt(value: float) -> str:
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.2e}"


def plot_metrics(records: Iterable[Dict[str, Any]], path: str, title: Optional[str] = None) -> str:
    """Draws the four panels for ``records`` (dicts as in ``metrics.jsonl``) into the PNG at ``path``.

    Duplicate epochs keep their last record; missing keys leave "not recorded" in
    their panel. Returns ``path``. Raises ``ValueError`` when no record has an epoch.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    records = last_per_epoch(records)
    if not records:
        raise ValueError("no records with an 'epoch' to plot")

    fig = Figure(figsize=(11, 7.5), dpi=100)
    FigureCanvasAgg(fig)  # Agg, without pyplot's global state
    axes = fig.subplots(2, 2, squeeze=False)  # a 2 x 2 array of Axes, typed as one
    first, last = int(records[0]["epoch"]), int(records[-1]["epoch"])
    for ax, (panel, ylabel, lines) in zip(axes.flat, panel_lines(records)):
        ax.set_title(panel, fontsize=12)
        drawn = 0
        plotted: List[float] = []
        for key, label, style, colour in lines:
            epochs, values = _series(records, key)
            if key.endswith("_per_sec_per_rank"):  # one rank: the same line as all ranks
                _, total = _series(records, key[:-len("_per_rank")])
                if total == values:
                    continue
            if not epochs:
                continue
            shown = _last_finite(values)
            ax.plot(epochs, values, style, color=colour, marker="o" if len(epochs) <= 30 else None, markersize=3.5,
                    label=f"{label} (last {_fmt(shown)})" if shown is not None else label)
            drawn += 1
            plotted.extend(v for v in values if math.isfinite(v))
        if drawn:
            ax.set_xlabel("epoch")
            ax.set_ylabel(ylabel)
            pad = 0.5 if first != last else 1.0
            ax.set_xlim(first - pad, last + pad)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=9 if drawn <= 4 else 7, loc="best")
            if panel == "Loss" and plotted and all(v > 0 for v in plotted):  # the tail (and any gap) stays visible
                ax.set_yscale("log")
                ax.set_ylabel("loss (log scale)")
            if panel == "Learning rate":
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
        else:
            keys = " / ".join(key for key, _, _, _ in lines)
            ax.text(0.5, 0.5, f"not recorded\n({keys} not in metrics.jsonl)", ha="center", va="center",
                    transform=ax.transAxes, fontsize=11, color="0.4")
            ax.set_xticks([])
            ax.set_yticks([])
    summary = f"{len(records)} epoch{'s' if len(records) != 1 else ''}"
    if first != 1:
        summary += f" ({first}-{last})"
    val_epochs, val_acc = _series(records, "val_accuracy")
    if val_acc and math.isfinite(val_acc[-1]):
        when = "final" if val_epochs[-1] == last else f"epoch {val_epochs[-1]}"
        summary += f", {when} val_accuracy {val_acc[-1]:.4f}"
    fig.suptitle(f"{title}: {summary}" if title else summary, fontsize=13)
    fig.tight_layout()
    # Written beside its place and moved in (a symbolic link planted at ``path`` is replaced, never written through)
    atomic_save(path, lambda tmp: fig.savefig(tmp, format="png"))
    return path


def main(argv: Sequence[str]) -> int:
    """Draws the workdir's ``metrics.jsonl`` into a PNG (``argv``: the program and the workdir, the flags parsed into
    :data:`FLAGS`); returns 0, or 2 after an error (one line)."""
    if len(argv) != 2:
        given = f"; received: {' '.join(argv[1:])}" if argv[1:] else ""
        command_line.fail(f"give one workdir, e.g. {USAGE}{given}")
    if os.path.isfile(argv[1]):
        path, workdir = argv[1], os.path.dirname(argv[1]) or "."
    else:
        path, workdir = os.path.join(argv[1], METRICS_FILE), argv[1]
    out = FLAGS.out or os.path.join(workdir, REPORT_FILE)
    try:
        records = read_records(path, workdir)
        title = FLAGS.title or os.path.basename(os.path.normpath(os.path.abspath(workdir)))
        plot_metrics(records, out, title=title)
    except OSError as exc:  # a folder it cannot write, a disk full: the user's to fix, in one line
        log.command_error(command_line.error_line(exc))
        return 2
    print(f"wrote {out}")
    return 0


def run() -> None:
    """``python -m hvdkeras.report``: :func:`main` under :func:`hvdkeras.common.command_line.run`."""
    command_line.run(main, FLAGS, __doc__ or "")


if __name__ == "__main__":
    run()
