"""hvdkeras.runtime.rendezvous: an open rendezvous fails closed, on a rank and where a rendezvous starts."""
import pytest

from hvdkeras.runtime import rendezvous

GLOO_RANK = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "4000"}


def test_a_gloo_rank_whose_launcher_set_no_secret_is_refused_in_one_line():
    from hvdkeras.common.errors import SetupError

    assert rendezvous.horovod_unpatched() is None  # this stack's Horovod is the patched build
    rendezvous.require_authenticated_rendezvous("this rank", dict(GLOO_RANK, HOROVOD_GLOO_RENDEZVOUS_SECRET="s"))
    rendezvous.require_authenticated_rendezvous("this rank", {})  # not a Gloo rank: MPI, or one process
    with pytest.raises(SetupError) as err:
        rendezvous.require_authenticated_rendezvous("this rank", dict(GLOO_RANK))
    assert str(err.value).startswith("this rank: its launcher started the Gloo rendezvous without the job's secret")
    assert "python -m hvdkeras.build_horovod" in str(err.value) and "\n" not in str(err.value)
    rendezvous.require_authenticated_rendezvous("this rank", dict(GLOO_RANK, HVDKERAS_ALLOW_OPEN_RENDEZVOUS="1"))


def test_a_horovod_without_the_patch_is_refused_on_a_rank_and_where_a_rendezvous_starts(monkeypatch):
    from horovod.runner.http import http_server

    from hvdkeras.common.errors import SetupError

    monkeypatch.delattr(http_server, "SECRET_ENV")  # as the package index's Horovod 0.28.1 is
    monkeypatch.delenv("HVDKERAS_ALLOW_OPEN_RENDEZVOUS", raising=False)
    assert "lacks hvdkeras's build patch 0010" in rendezvous.horovod_unpatched()
    with pytest.raises(SetupError, match=r"^this rank: the Horovod this process imports \(.*\) lacks hvdkeras's"):
        rendezvous.require_authenticated_rendezvous("this rank", dict(GLOO_RANK, HOROVOD_GLOO_RENDEZVOUS_SECRET="s"))
    with pytest.raises(SetupError, match=r"^hvdkeras.spark.run on the driver: the Horovod this process imports"):
        rendezvous.require_authenticated_rendezvous("hvdkeras.spark.run on the driver", {}, launcher=True)
