"""benchmarks.exchange_plot on sweeps written as benchmarks.exchange_scaling writes them."""
import json

import pytest

from benchmarks import exchange_plot
from benchmarks.exchange_scaling import ring_seconds

RATE = 200_000_000


def _sweep(model="applications.MobileNetV2", grad_bytes=14_000_000, rate=RATE):
    rows = [{"hosts": n, "gradient_bytes": grad_bytes, "median_s": 1.1 * ring_seconds(grad_bytes, n, rate),
             "min_s": ring_seconds(grad_bytes, n, rate), "max_s": 1.2 * ring_seconds(grad_bytes, n, rate)}
            for n in (2, 4, 3)]
    return {"model": model, "link_bps": rate, "table": rows}


def test_a_panel_has_the_points_in_host_order_and_the_model_from_two_to_the_largest_count():
    p = exchange_plot.panel(_sweep())
    assert p["title"] == "MobileNetV2, 14 MB, 200mbit"
    assert p["hosts"] == [2, 3, 4] and p["model_hosts"] == [2, 3, 4]
    assert p["model_s"] == pytest.approx([0.56, 0.7466667, 0.84])
    assert p["median_s"][0] == pytest.approx(1.1 * 0.56)


def test_an_unshaped_sweep_has_no_model_line():
    p = exchange_plot.panel(_sweep() | {"link_bps": None})
    assert p["model_s"] == [] and p["title"].endswith("unlimited")


def test_the_command_draws_one_panel_per_sweep(tmp_path, capsys):
    paths = []
    for i, sweep in enumerate([_sweep(), _sweep("applications.ResNet50", 102_000_000, 500_000_000)]):
        paths.append(str(tmp_path / f"{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(sweep, f)
    out = tmp_path / "plot.png"
    assert exchange_plot.main([*paths, "--out", str(out)]) == 0
    assert out.stat().st_size > 1000 and str(out) in capsys.readouterr().out


def test_a_file_that_is_not_a_sweep_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        exchange_plot.main([str(tmp_path / "missing.json")])
    assert exit_.value.code == 2 and "is not an exchange_scaling.json" in capsys.readouterr().err
