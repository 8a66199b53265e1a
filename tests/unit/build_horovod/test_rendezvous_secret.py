"""Patch 0010: Horovod's Gloo rendezvous answers only requests that carry the job's secret.

The installed Horovod's own servers, on loopback: the static rendezvous, the elastic one (whose PUT unpickles) and
the function mode's store. Without the secret a GET, a PUT, a DELETE and a crafted pickle are each refused (403)
before anything is read or stored, and the pickle runs nothing; with it, Horovod's own clients work as before.
"""
import base64
import os
import pickle
import urllib.error
import urllib.request

import pytest

pytest.importorskip("horovod.runner.http.http_server")
from horovod.runner.common.util.hosts import SlotInfo  # noqa: E402
from horovod.runner.http import http_client, http_server  # noqa: E402

SECRET = "f" * 64


def _request(port, method, path, body=None, secret=None):
    """The HTTP status of one request (with ``secret`` in Horovod's header when given)."""
    headers = {http_server.SECRET_HEADER: secret} if secret else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


class Marker:
    """Unpickling it creates the file ``path``: what a crafted PUT body would run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def rendezvous():
    server = http_server.RendezvousServer(verbose=0, secret=SECRET)
    port = server.start(host="127.0.0.1")
    server.init([SlotInfo(hostname="h", rank=0, local_rank=0, cross_rank=0, size=1, local_size=1, cross_size=1)])
    yield port
    server.stop()


def test_without_the_secret_every_method_is_refused_and_nothing_is_stored(rendezvous):
    assert _request(rendezvous, "PUT", "/global/0", b"x") == 403
    assert _request(rendezvous, "PUT", "/global/0", b"x", secret="0" * 64) == 403  # a wrong one
    assert _request(rendezvous, "GET", "/global/0") == 403
    assert _request(rendezvous, "DELETE", "/global/0") == 403
    assert _request(rendezvous, "GET", "/global/0", secret=SECRET) == 404  # nothing was stored
    assert _request(rendezvous, "PUT", "/global/0", b"x", secret=SECRET) == 200
    assert _request(rendezvous, "GET", "/global/0", secret=SECRET) == 200
    assert _request(rendezvous, "HEAD", "/") == 400  # no file of the launcher's folder served


def test_the_elastic_rendezvous_unpickles_nothing_without_the_secret(tmp_path):
    from horovod.runner.elastic.rendezvous import PUT_WORKER_ADDRESSES, create_rendezvous_handler

    class Driver:
        def register_worker_server(self, *args):
            raise AssertionError("a worker registered without the secret")

    marker = tmp_path / "MARKER"
    server = http_server.RendezvousServer(verbose=0, secret=SECRET)
    port = server.start(create_rendezvous_handler(Driver()), host="127.0.0.1")
    try:
        body = base64.b64encode(pickle.dumps(Marker(str(marker))))
        assert _request(port, "PUT", f"/{PUT_WORKER_ADDRESSES}/h:0", body) == 403
    finally:
        server.stop()
    assert not marker.exists()


def test_horovods_clients_carry_the_secret_from_the_ranks_environment(monkeypatch):
    store = http_server.KVStoreServer(verbose=0, secret=SECRET)
    port = store.start_server(host="127.0.0.1")
    try:
        http_client.put_data_into_kvstore("127.0.0.1", port, "runfunc", "func", [1, 2], secret=SECRET)
        with pytest.raises(RuntimeError):  # no secret anywhere: refused
            monkeypatch.delenv(http_server.SECRET_ENV, raising=False)
            http_client.read_data_from_kvstore("127.0.0.1", port, "runfunc", "func")
        monkeypatch.setenv(http_server.SECRET_ENV, SECRET)  # as horovodrun gives it to each rank
        assert http_client.read_data_from_kvstore("127.0.0.1", port, "runfunc", "func") == [1, 2]
    finally:
        store.shutdown_server()


def test_the_job_secret_comes_from_horovodruns_own_key_and_a_server_without_one_is_open():
    assert http_server.rendezvous_secret(None) is None
    assert len(http_server.rendezvous_secret(os.urandom(32))) == 64
    server = http_server.RendezvousServer(verbose=0)  # Horovod's Spark and Ray runners: as before
    port = server.start(host="127.0.0.1")
    try:
        assert _request(port, "GET", "/global/0") == 404
    finally:
        server.stop()
