"""benchmarks.link_sweep: the link list, the GPU rate's rounding, and the lab torn down on every exit."""
import os
import signal
import types

import pytest

from benchmarks import link_sweep as sweep
from lab import hosts, shaper


def test_link_list_keeps_order_and_the_gpu_token():
    assert sweep.parse_link("unlimited, 1gbit,gpu") == [None, 1_000_000_000, "gpu"]
    with pytest.raises(ValueError, match="Received: ''"):
        sweep.parse_link("")
    with pytest.raises(ValueError, match="Received: '1gb'"):
        sweep.parse_link("1gb")


def test_gpu_rate_is_rounded_to_two_significant_digits():
    assert sweep.round_rate(527_813_000) == 530_000_000
    assert sweep.round_rate(1_049_000_000) == 1_000_000_000


@pytest.fixture
def fake_lab(monkeypatch):
    """hosts.up/down and the shaper's clear recorded instead of run (the real ones need root)."""
    calls = []
    info = types.SimpleNamespace(hosts=[])
    monkeypatch.setattr(hosts, "can_run", lambda: (True, ""))
    monkeypatch.setattr(hosts, "up", lambda tmpdir, hosts=2: calls.append(f"up {hosts}") or info)
    monkeypatch.setattr(hosts, "down", lambda i=None: calls.append("down"))
    monkeypatch.setattr(shaper, "clear", lambda ends: calls.append("clear"))
    return calls


def test_the_lab_is_torn_down_after_an_error(fake_lab):
    with pytest.raises(RuntimeError, match="job failed"):
        with sweep.lab(2):
            raise RuntimeError("job failed")
    assert fake_lab == ["up 2", "clear", "down"]


def test_the_lab_is_torn_down_on_sigterm(fake_lab):
    with pytest.raises(SystemExit) as exit_:
        with sweep.lab(2):
            os.kill(os.getpid(), signal.SIGTERM)
    assert exit_.value.code == 128 + signal.SIGTERM
    assert fake_lab == ["up 2", "clear", "down"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_the_lab_builds_two_to_eight_hosts_and_clears_all_their_links(fake_lab, monkeypatch):
    cleared = []
    monkeypatch.setattr(shaper, "clear", lambda ends: cleared.append(ends))
    with sweep.lab(5):
        pass
    assert fake_lab == ["up 5", "down"]
    assert cleared == [hosts.link_ends(5)] and len(cleared[0]) == 10


def test_the_lab_refuses_other_host_counts_and_says_why_it_cannot_run(monkeypatch):
    for bad in (1, 9):
        with pytest.raises(ValueError, match=f"2 to 8 hosts. Received: {bad}"):
            with sweep.lab(bad):
                pass
    monkeypatch.setattr(hosts, "can_run", lambda: (False, "needs root"))
    with pytest.raises(RuntimeError, match="the lab cannot run here: needs root"):
        with sweep.lab(2):
            pass


def test_the_ceiling_runs_once_per_round_unshaped_and_the_rows_rotate(fake_lab, monkeypatch):
    import contextlib

    jobs = []
    link = {"rate": "unshaped"}

    @contextlib.contextmanager
    def shaped(ends, rate):
        link["rate"] = rate
        yield
        link["rate"] = "unshaped"

    def run_variant(variant, args, n, workdir, place):
        jobs.append((variant, link["rate"]))
        return {"images_per_sec": 32.0, "gradient_bytes": 14_000_000}

    monkeypatch.setattr(shaper, "shaped", shaped)
    monkeypatch.setattr(sweep, "run_variant", run_variant)
    monkeypatch.setattr(sweep, "on_hosts", lambda info: None)
    monkeypatch.setattr(hosts, "link_ends", lambda n=2: [])
    fake_lab_info = types.SimpleNamespace(hosts=[1, 2])
    monkeypatch.setattr(hosts, "up", lambda tmpdir, hosts=2: fake_lab.append("up") or fake_lab_info)
    args = types.SimpleNamespace(hosts=2, rounds=2, batch=16)
    out = sweep.run_sweep(["a", "b", "ceiling"], [None, "gpu"], args, log=lambda line: None)
    gpu = out["rates_bps"][1]
    assert jobs == [("ceiling", "unshaped"), ("a", None), ("b", None), ("a", gpu), ("b", gpu),
                    ("ceiling", "unshaped"), ("b", None), ("a", None), ("b", gpu), ("a", gpu)]
    assert out["calibration"]["ceiling_images_per_sec"] == 32.0
    assert [r["round"] for r in out["runs"]["ceiling"][out["rates"][1]]] == [0, 1]  # listed under every rate
    assert fake_lab[-2:] == ["clear", "down"]
