"""benchmarks.efficiency: the lab's arithmetic, checked against hand-computed values."""
import json

import pytest

from benchmarks import efficiency


def test_ring_allreduce_moves_two_n_minus_one_over_n_of_the_bytes():
    assert efficiency.ring_allreduce_bytes(100.0, 1) == 0.0
    assert efficiency.ring_allreduce_bytes(100.0, 2) == 100.0
    assert efficiency.ring_allreduce_bytes(100.0, 8) == pytest.approx(175.0)
    with pytest.raises(ValueError, match="received: 0"):
        efficiency.ring_allreduce_bytes(1.0, 0)


def test_allreduce_seconds_is_bits_over_rate_and_zero_when_unlimited():
    assert efficiency.allreduce_seconds(125e6, 2, 1e9) == pytest.approx(1.0)  # 1 Gbit at 1 Gbit/s
    assert efficiency.allreduce_seconds(125e6, 2, None) == 0.0


def test_the_dgx_ratio_is_the_issue_arithmetic():
    # 0.108 s of compute per step (256 / 2375), 178.9 MB per worker at 3.125 GB/s = 0.057 s.
    assert 256 / 2375 == pytest.approx(0.1078, abs=1e-4)
    assert efficiency.allreduce_seconds(efficiency.RESNET50_GRADIENT_BYTES, 8, 25e9) == pytest.approx(0.0572,
                                                                                                       abs=1e-4)
    assert efficiency.dgx_ratio() == pytest.approx(0.531, abs=0.001)


def test_gpu_equivalent_rate_makes_the_allreduce_that_fraction_of_compute():
    rate = efficiency.gpu_equivalent_rate(14e6, 0.43, workers=2, ratio=0.5)
    assert rate == pytest.approx(14e6 * 8 / 0.215)
    assert efficiency.allreduce_seconds(14e6, 2, rate) == pytest.approx(0.5 * 0.43)
    default = efficiency.gpu_equivalent_rate(14e6, 0.43)
    assert efficiency.allreduce_seconds(14e6, 2, default) == pytest.approx(efficiency.dgx_ratio() * 0.43)


def test_efficiency_and_the_step_split():
    assert efficiency.scaling_efficiency(45.0, 50.0) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="received: 0"):
        efficiency.scaling_efficiency(1.0, 0)
    split = efficiency.split_step(images_per_sec=32.0, ceiling_images_per_sec=40.0, global_batch=32)
    assert (split.step_s, split.compute_s, split.exposed_comm_s) == pytest.approx((1.0, 0.8, 0.2))
    faster = efficiency.split_step(41.0, 40.0, 32)  # noise: a row above its ceiling exposes nothing
    assert faster.exposed_comm_s == 0.0


def test_projection_without_overlap_is_compute_over_compute_plus_wire_time():
    eff = efficiency.projected_efficiency(1.0, 125e6, 2, 1e9, overlap=False)
    assert eff == pytest.approx(0.5)  # 1 s of compute, 1 s on the wire


def test_projection_with_overlap_hides_up_to_the_backward_pass_but_never_the_tail():
    # 1 s on the wire, 2/3 s of it under the backward pass: 1/3 s exposed.
    assert efficiency.projected_efficiency(1.0, 125e6, 2, 1e9, overlap=True) == pytest.approx(1 / (1 + 1 / 3))
    # A fast link: everything fits under the backward pass but the tail (5% of the wire time).
    fast = efficiency.projected_efficiency(1.0, 125e6, 2, 100e9, overlap=True)
    assert fast == pytest.approx(1 / (1 + 0.05 * 0.01))


def test_projection_rows_and_rate_scaling():
    rows = efficiency.projection(1.0, 125e6, [2, 8], [1e9, 4e9], scale=4.0)
    assert len(rows) == 8 and {r["overlap"] for r in rows} == {False, True}
    at = {(r["workers"], r["rate_bps"], r["overlap"]): r["efficiency"] for r in rows}
    assert at[(2, 4e9, False)] == pytest.approx(0.5)  # 4 Gbit/s scaled by 4 is the lab's 1 Gbit/s
    assert at[(8, 4e9, False)] < at[(2, 4e9, False)]  # more workers move more bytes each
    assert at[(8, 4e9, True)] > at[(8, 4e9, False)]


def test_the_measured_factor_is_interpolated_between_measured_counts_and_held_beyond_them():
    factors = {2: 1.08, 4: 1.12, 8: 1.22}
    assert efficiency.comm_factor(None, 64) == 1.0
    assert efficiency.comm_factor(factors, 2) == 1.08 and efficiency.comm_factor(factors, 1) == 1.08
    assert efficiency.comm_factor(factors, 3) == pytest.approx(1.10)
    assert efficiency.comm_factor(factors, 6) == pytest.approx(1.17)
    assert efficiency.comm_factor(factors, 256) == 1.22


def test_the_factors_come_from_a_shaped_sweeps_table():
    sweep = {"table": [{"hosts": 2, "measured_over_model": 1.08}, {"hosts": 4, "measured_over_model": 1.12}]}
    assert efficiency.measured_factors(sweep) == {2: 1.08, 4: 1.12}
    with pytest.raises(ValueError, match="no measured/model ratio.*--link at a rate"):
        efficiency.measured_factors({"table": [{"hosts": 2, "measured_over_model": None}]})


def test_a_measured_factor_lengthens_the_exchange_in_the_projection():
    ring = efficiency.projected_efficiency(1.0, 125e6, 2, 1e9, overlap=False)
    assert efficiency.projected_efficiency(1.0, 125e6, 2, 1e9, overlap=False, factor=1.5) == pytest.approx(1 / 2.5)
    assert ring == pytest.approx(0.5)
    rows = efficiency.projection(1.0, 125e6, [2, 8], [1e9], comm_factors={2: 1.5, 8: 2.0})
    assert [r["comm_factor"] for r in rows] == [1.5, 1.5, 2.0, 2.0]


def test_the_dgx_projection_command(tmp_path, capsys):
    path = tmp_path / "exchange_scaling.json"
    path.write_text(json.dumps({"table": [{"hosts": 2, "measured_over_model": 1.0},
                                          {"hosts": 8, "measured_over_model": 2.0}]}))
    assert efficiency.main([str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(efficiency.DGX_WORKERS) * len(efficiency.DGX_RATES_BPS)
    first = lines[1].split()  # 8 workers at 25 Gbit/s, the DGX ratio 0.53: ring 1 / 1.53 without overlap
    assert first[:3] == ["8", "25", "2.00"] and float(first[5]) == pytest.approx(1 / (1 + efficiency.dgx_ratio()),
                                                                                 abs=1e-3)
    assert float(first[6]) == pytest.approx(1 / (1 + 2 * efficiency.dgx_ratio()), abs=1e-3)
    assert efficiency.main([]) == 2 and "usage" in capsys.readouterr().err
    assert efficiency.main([str(tmp_path / "missing.json")]) == 2 and "missing.json" in capsys.readouterr().err
