"""hvdkeras.bench.contention: the fair-share arithmetic and spinners that never outlive their block."""
import pytest

from hvdkeras.bench import contention


def test_fair_share_of_two_single_threaded_ranks_on_two_cores():
    assert [contention.fair_share(2, k, cores=2) for k in (0, 1, 2, 4, 6)] == pytest.approx(
        [1.0, 2 / 3, 1 / 2, 1 / 3, 1 / 4])
    assert contention.fair_share(2, 2, cores=8) == 1.0  # enough cores: nobody waits


def test_spinners_run_during_the_block_and_are_gone_after_it():
    import multiprocessing

    seen = contention.with_spinners(2, lambda: [p for p in multiprocessing.active_children() if p.is_alive()])
    assert len(seen) == 2
    assert not any(p.is_alive() for p in seen)
