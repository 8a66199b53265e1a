"""benchmarks.link_summary: rounds paired with their own ceiling, the table, the files."""
import json
import types

import pytest

from benchmarks import link_summary as summary


def _sweep():
    def runs(values):
        return {"unlimited": [{"images_per_sec": v, "round": i} for i, v in enumerate(values[:2])],
                "500mbit": [{"images_per_sec": v, "round": i} for i, v in enumerate(values[2:])]}

    return {"rates": ["unlimited", "500mbit"], "rates_bps": [None, 500_000_000],
            "calibration": {"compute_s": 0.8, "gradient_bytes": 14e6, "gpu_equivalent_bps": 500_000_000},
            "runs": {"hvdkeras": runs([36, 30, 30, 20]), "mwms": runs([30, 30, 20, 20]),
                     "ceiling": runs([40, 30, 40, 25])}}


def test_each_round_is_divided_by_the_ceiling_of_the_same_round():
    table = summary.summarize_sweep(_sweep(), global_batch=32)
    eff = table["hvdkeras"]["500mbit"]["efficiency"]
    assert eff["rounds"] == pytest.approx([30 / 40, 20 / 25])
    assert eff["median"] == pytest.approx((0.75 + 0.8) / 2)
    assert table["hvdkeras"]["unlimited"]["efficiency"]["rounds"] == pytest.approx([0.9, 1.0])
    assert table["ceiling"]["500mbit"]["efficiency"]["median"] == 1.0


def test_the_step_splits_into_the_ceilings_compute_and_the_rest():
    row = summary.summarize_sweep(_sweep(), global_batch=32)["hvdkeras"]["500mbit"]
    assert row["step_s"] == pytest.approx(32 / 25)  # median of 30 and 20 images/s
    assert row["compute_s"] == pytest.approx(32 / 32.5)  # median of the ceilings, 40 and 25
    assert row["exposed_comm_s"] == pytest.approx(32 / 25 - 32 / 32.5)


def test_cpu_per_rank_and_stolen_cores_are_kept_with_their_spread():
    sweep = _sweep()
    for i, r in enumerate(sweep["runs"]["ceiling"]["500mbit"]):
        r.update(cpu_cores_per_rank=[0.98, 0.49][i], stolen_cores=[0.0, 0.9][i])
    row = summary.summarize_sweep(sweep, global_batch=32)["ceiling"]["500mbit"]
    assert row["cpu_cores_per_rank"] == {"median": pytest.approx(0.735), "min": 0.49, "max": 0.98,
                                         "rounds": [0.98, 0.49]}
    assert row["stolen_cores"]["max"] == 0.9
    assert "cpu_cores_per_rank" not in summary.summarize_sweep(sweep, global_batch=32)["hvdkeras"]["500mbit"]


def test_rows_at_equal_settings_are_compared_round_by_round_per_rate():
    sweep = _sweep()
    sweep["runs"]["hvdkeras-fp32"] = sweep["runs"].pop("hvdkeras")
    compared = summary.compare_sweep(sweep)
    (pair,) = compared["500mbit"]
    assert pair["pair"] == "hvdkeras-fp32 / mwms" and pair["equal_settings"]
    assert pair["rounds"] == pytest.approx([30 / 20, 20 / 20])  # each round against the same round
    assert pair["median"] == pytest.approx(1.25)
    text = summary.table_text(summary.summarize_sweep(sweep, global_batch=32), sweep["rates"], compared)
    assert "hvdkeras-fp32 / mwms" in text and "equal: fp32 gradients" in text


def test_text_json_and_charts_are_written(tmp_path):
    args = types.SimpleNamespace(model="applications.MobileNetV2", image_size=224, batch=16, steps=10, rounds=2,
                                 hosts=2)
    lines = []
    result = summary.write_all(_sweep(), args, str(tmp_path), log=lines.append)
    assert "efficiency" in lines[0] and "500mbit" in lines[0]
    saved = json.loads((tmp_path / "lab.json").read_text())
    assert saved["table"]["hvdkeras"]["500mbit"]["efficiency"]["median"] == pytest.approx(0.775)
    assert {r["workers"] for r in saved["projection"]} == {8, 16, 32, 64, 128, 256}
    assert saved["projection_check"][0]["rate"] == "500mbit" and result["projection_check"]
    assert saved["pairs"]["500mbit"][0]["pair"] == "hvdkeras / mwms"  # the defaults: fp32 as MWMS
    assert saved["pairs"]["500mbit"][0]["equal_settings"]
    assert (tmp_path / "lab_efficiency.png").stat().st_size > 1000
    assert (tmp_path / "projection.png").stat().st_size > 1000


def test_the_projection_takes_the_measured_factors_over_the_ring_model(tmp_path):
    args = types.SimpleNamespace(model="applications.MobileNetV2", image_size=224, batch=16, steps=10, rounds=2,
                                 hosts=2, comm_factors={2: 1.1, 8: 1.2})
    result = summary.write_all(_sweep(), args, str(tmp_path), log=lambda line: None)
    assert {r["comm_factor"] for r in result["projection"]} == {1.2}  # 8 workers and more: the largest count's
    plain = summary.projection_table(_sweep()["calibration"])
    assert {r["comm_factor"] for r in plain} == {1.0}
    slower = [m["efficiency"] < p["efficiency"] for m, p in zip(result["projection"], plain)]
    assert all(slower) and result["projection_comm_factors"] == {2: 1.1, 8: 1.2}
