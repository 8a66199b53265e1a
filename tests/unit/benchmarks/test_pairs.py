"""benchmarks.pairs: which rows are compared, the per-round paired ratio and the interval for its median."""
import pytest

from benchmarks import pairs


def test_equal_settings_pairs_are_the_lab_rows_and_different_ones_are_labelled():
    equal = [p.name for p in pairs.PAIRS if p.equal]
    assert equal == ["hvdkeras-fp32 / horovod", "hvdkeras-fp16 / horovod-fp16", "hvdkeras-fp32 / mwms",
                     "hvdkeras / horovod", "hvdkeras / mwms"]
    assert [p.name for p in pairs.pairs_among(["hvdkeras", "horovod", "ceiling"])] == ["hvdkeras / horovod"]
    (different,) = pairs.pairs_among(["hvdkeras-fp16", "horovod"])
    assert not different.equal and "fp16 gradients against the recipe's fp32" in different.settings


def test_ratios_pair_the_same_round_and_skip_a_round_one_side_lacks():
    row = [{"round": 0, "images_per_sec": 30.0}, {"round": 1, "images_per_sec": 20.0},
           {"round": 2, "images_per_sec": 33.0}]
    counterpart = [{"round": 1, "images_per_sec": 10.0}, {"round": 0, "images_per_sec": 25.0}]
    assert pairs.paired_ratios(row, counterpart) == pytest.approx([1.2, 2.0])


@pytest.mark.parametrize("n, k, coverage", [(3, 1, 0.75), (4, 1, 0.875), (5, 1, 0.9375), (7, 1, 0.984375),
                                            (8, 2, 0.9296875), (10, 2, 0.978515625), (12, 3, 0.9614257812)])
def test_the_interval_is_the_widest_k_with_at_least_90_percent(n, k, coverage):
    values = [float(v) for v in range(n)]
    got = pairs.median_interval(values[::-1])  # order does not matter
    assert got["low"] == values[k - 1] and got["high"] == values[n - k]
    assert got["coverage"] == pytest.approx(coverage)
    assert got["spread"] == pytest.approx((values[n - k] - values[k - 1]) / 2)
    assert got["median"] == pytest.approx((n - 1) / 2)


def test_an_empty_list_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"received: \[\]"):
        pairs.median_interval([])


def test_compare_gives_each_pair_that_ran_with_its_text():
    runs = {"hvdkeras-fp16": [{"round": i, "images_per_sec": v} for i, v in enumerate([36, 37, 26, 36, 35])],
            "horovod-fp16": [{"round": i, "images_per_sec": v} for i, v in enumerate([34, 35, 25, 35, 36])],
            "ceiling": [{"round": i, "images_per_sec": 40} for i in range(5)]}
    (c,) = pairs.compare(runs)
    assert c["pair"] == "hvdkeras-fp16 / horovod-fp16" and c["equal_settings"]
    assert c["median"] == pytest.approx(26 / 25) and c["low"] == pytest.approx(35 / 36)
    assert c["high"] == pytest.approx(36 / 34) and c["coverage"] == pytest.approx(0.9375)
    (line,) = pairs.compare_text([c], "gpu")
    assert "hvdkeras-fp16 / horovod-fp16" in line and "94%" in line and "equal: fp16 gradients" in line
