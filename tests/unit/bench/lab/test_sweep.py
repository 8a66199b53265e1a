"""hvdkeras.bench.lab.sweep: the link list, the GPU rate's rounding, and the lab torn down on every exit."""
import os
import signal
import types

import pytest

from hvdkeras.bench.lab import hosts, shaper, sweep


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
    monkeypatch.setattr(hosts, "up", lambda tmpdir: calls.append("up") or info)
    monkeypatch.setattr(hosts, "down", lambda i=None: calls.append("down"))
    monkeypatch.setattr(shaper, "clear", lambda ends: calls.append("clear"))
    return calls


def test_the_lab_is_torn_down_after_an_error(fake_lab):
    with pytest.raises(RuntimeError, match="job failed"):
        with sweep.lab(2):
            raise RuntimeError("job failed")
    assert fake_lab == ["up", "clear", "down"]


def test_the_lab_is_torn_down_on_sigterm(fake_lab):
    with pytest.raises(SystemExit) as exit_:
        with sweep.lab(2):
            os.kill(os.getpid(), signal.SIGTERM)
    assert exit_.value.code == 128 + signal.SIGTERM
    assert fake_lab == ["up", "clear", "down"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_the_lab_refuses_other_host_counts_and_says_why_it_cannot_run(monkeypatch):
    with pytest.raises(ValueError, match="received: --hosts 3"):
        with sweep.lab(3):
            pass
    monkeypatch.setattr(hosts, "can_run", lambda: (False, "needs root"))
    with pytest.raises(RuntimeError, match="the lab cannot run here: needs root"):
        with sweep.lab(2):
            pass
