"""Which row is compared with which, and how: the per-round paired ratio and an interval for its median.

Rows run in interleaved rounds (every row once per round). The machine's speed drifts from
round to round by more than rows differ within one (other sessions share its cores), so a
row is compared with its counterpart round by round: ``ratio_i = row_i / counterpart_i``.
The summary is the median of those ratios and a distribution-free interval for that
median: the order statistics ``r(k)`` and ``r(n + 1 - k)`` of the ``n`` ratios, with the
largest ``k`` whose coverage ``1 - 2 P(Binomial(n, 1/2) <= k - 1)`` is at least 90 %
(with 5 rounds: the smallest and largest ratio, 94 %; with 4 or fewer rounds no interval
reaches 90 %, and the smallest and largest are given with their lower coverage). The
**spread** is half that interval's width: a comparison decides at a size of effect
larger than its spread.

A pair says what its two rows share: equal settings (the same gradient format), or what differs
(labelled ``different``); headline ratios use equal settings only.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

COVERAGE = 0.90


@dataclasses.dataclass(frozen=True)
class Pair:
    row: str
    counterpart: str
    settings: str  # "equal: ..." or what differs

    @property
    def name(self) -> str:
        return f"{self.row} / {self.counterpart}"

    @property
    def equal(self) -> bool:
        return self.settings.startswith("equal")


PAIRS = (
    Pair("hvdkeras-fp32", "horovod", "equal: fp32 gradients"),
    Pair("hvdkeras-fp16", "horovod-fp16", "equal: fp16 gradients"),
    Pair("hvdkeras-fp32", "mwms", "equal: fp32 gradients"),
    Pair("hvdkeras", "horovod", "equal: fp32 gradients (hvdkeras's defaults: horovod.compression=none)"),
    Pair("hvdkeras", "mwms", "equal: fp32 gradients (hvdkeras's defaults: horovod.compression=none)"),
    Pair("hvdkeras-fp16", "horovod", "different: hvdkeras's fp16 gradients against the recipe's fp32"),
    Pair("hvdkeras-fp16", "mwms", "different: hvdkeras's fp16 gradients against MWMS's fp32"),
)


def pairs_among(rows: Iterable[str]) -> list[Pair]:
    """The pairs of :data:`PAIRS` whose two rows both ran."""
    ran = set(rows)
    return [p for p in PAIRS if p.row in ran and p.counterpart in ran]


def median_interval(values: Sequence[float], coverage: float = COVERAGE) -> dict:
    """``{median, low, high, coverage, spread}``: the module docstring's interval for the median of ``values``."""
    if not values:
        raise ValueError("median_interval needs at least one value; received: []")
    ordered, n = sorted(values), len(values)
    k = 1
    while k + 1 <= (n + 1) // 2 and _coverage(n, k + 1) >= coverage:
        k += 1
    low, high = ordered[k - 1], ordered[n - k]
    return {"median": statistics.median(ordered), "low": low, "high": high, "coverage": _coverage(n, k),
            "spread": (high - low) / 2}


def _coverage(n: int, k: int) -> float:
    """``P(r(k) <= median <= r(n + 1 - k))`` for ``n`` values of a continuous distribution."""
    below = sum(math.comb(n, i) for i in range(k)) / 2 ** n
    return 1 - 2 * below


def paired_ratios(row: Sequence[Mapping], counterpart: Sequence[Mapping], key: str = "images_per_sec") -> list:
    """``row[round][key] / counterpart[round][key]`` for each round both ran (results carry ``round``)."""
    theirs = {r["round"]: r[key] for r in counterpart}
    return [r[key] / theirs[r["round"]] for r in row if r["round"] in theirs and theirs[r["round"]] > 0]


def compare(runs: Mapping[str, Sequence[Mapping]]) -> list[dict]:
    """For each pair among ``runs`` (``{row: results of its rounds}``): its name, settings, the per-round ratios
    and :func:`median_interval` of them."""
    out = []
    for pair in pairs_among(runs):
        ratios = paired_ratios(runs[pair.row], runs[pair.counterpart])
        if ratios:
            out.append({"pair": pair.name, "row": pair.row, "counterpart": pair.counterpart,
                        "settings": pair.settings, "equal_settings": pair.equal, "rounds": ratios,
                        **median_interval(ratios)})
    return out


HEADER = "paired ratios, round by round: median [interval for it, coverage], spread"


def compare_text(compared: Sequence[Mapping], label: str = "") -> list[str]:
    """One line per pair: the median ratio, its interval and coverage, the spread and the settings."""
    return [f"{label:>10} {c['pair']:30} {c['median']:6.3f} [{c['low']:.3f}-{c['high']:.3f},"
            f" {c['coverage']:.0%}] spread {c['spread']:.3f}  {c['settings']}" for c in compared]
