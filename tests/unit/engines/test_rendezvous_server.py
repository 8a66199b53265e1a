"""hvdkeras.engines.rendezvous_server: each rank's Horovod settings, and the gang's server answering only its secret."""
import urllib.error
import urllib.request

import pytest

from hvdkeras.engines import rendezvous_server
from hvdkeras.engines.placement import slot_plan


def test_a_ranks_environment_names_its_place_the_rendezvous_and_gloo():
    (slot,) = slot_plan(["10.0.0.1"])
    env = rendezvous_server.rank_environment(slot, ("10.0.0.1", 4242), "eth1")
    assert env["HOROVOD_RANK"] == "0" and env["HOROVOD_SIZE"] == "1" and env["HOROVOD_HOSTNAME"] == "10.0.0.1"
    assert (env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == ("10.0.0.1", "4242")
    assert env["HOROVOD_CONTROLLER"] == env["HOROVOD_CPU_OPERATIONS"] == "gloo"
    assert env["HOROVOD_GLOO_IFACE"] == env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert "HOROVOD_GLOO_IFACE" not in rendezvous_server.rank_environment(slot, ("10.0.0.1", 4242), None)
    assert "HOROVOD_GLOO_RENDEZVOUS_SECRET" not in env
    secret = rendezvous_server.gang_secret("the fit's relay token")
    assert len(secret) == 64 and secret != rendezvous_server.gang_secret("another fit's")
    with_secret = rendezvous_server.rank_environment(slot, ("10.0.0.1", 4242), None, secret)
    assert with_secret["HOROVOD_GLOO_RENDEZVOUS_SECRET"] == secret


def test_the_gangs_server_listens_on_its_host_alone_and_answers_only_the_secret():
    pytest.importorskip("horovod.runner.http.http_server")
    secret = rendezvous_server.gang_secret("token")
    server = rendezvous_server.start("127.0.0.1", slot_plan(["127.0.0.1"] * 2), secret)
    try:
        host, port = server.server_address
        assert host == "127.0.0.1"

        def status(method, headers):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/global/key", data=b"v" if method == "PUT" else None,
                                         headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert status("PUT", {}) == status("PUT", {"X-Horovod-Secret": "f" * 64}) == 403
        assert status("GET", {"X-Horovod-Secret": secret}) == 404  # nothing was stored
        assert status("PUT", {"X-Horovod-Secret": secret}) == 200
        assert status("GET", {"X-Horovod-Secret": secret}) == 200
        assert status("GET", {}) == 403
    finally:
        server.shutdown()
        server.server_close()
