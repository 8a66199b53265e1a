"""What an outsider on the job's network sends to the job's ports:
``outsider.py MARKER ADDR:PORT ... [--raw ADDR:PORT ...]``.

Runs in the lab's outsider namespace (``lab.hosts.outsider``). To each port before ``--raw`` (the launcher's), over
HTTP as Horovod's rendezvous speaks it: a GET, a PUT and a DELETE of a rank's rendezvous key, an elastic driver's
rank-and-size GET, and a PUT of a crafted pickle under ``worker_addresses`` whose unpickling would create the file
MARKER. To each port after ``--raw`` (a rank's beacon on its host), what a probe sends, with a token that is not
the job's: 16 bytes, then the answer is read. Prints one JSON object: ``{"ADDR:PORT": {"get": status, ...}}``, a
status being the HTTP code, or ``"no-http"`` when the port did not answer HTTP (not the rendezvous: Horovod's task
services check their messages' HMAC), or ``"refused"``; for a raw port ``{"token": "closed"}`` (closed unanswered),
``"silent"`` (nothing within 4 s), ``"refused"``, or ``"answered"`` with what came back.
"""
import base64
import http.client
import json
import os
import pickle
import socket
import sys


class Marker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def status(addr, port, method, path, body=None):
    conn = http.client.HTTPConnection(addr, port, timeout=2)
    try:
        conn.request(method, path, body=body)
        return conn.getresponse().status
    except ConnectionRefusedError:
        return "refused"
    except (OSError, http.client.HTTPException):
        return "no-http"
    finally:
        conn.close()


def token_probe(addr, port):
    """A beacon probe with 16 random bytes for a token: what came back."""
    try:
        with socket.create_connection((addr, port), timeout=2) as conn:
            conn.sendall(os.urandom(16))
            conn.settimeout(4)
            answer = conn.recv(16)
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "silent"
    except OSError:
        return "closed"  # reset
    return "closed" if not answer else f"answered {answer!r}"


def main(marker, targets):
    pickled = base64.b64encode(pickle.dumps(Marker(marker)))
    found = {}
    raw = targets[targets.index("--raw") + 1:] if "--raw" in targets else []
    targets = targets[:targets.index("--raw")] if "--raw" in targets else targets
    for target in raw:
        addr, port = target.rsplit(":", 1)
        found[target] = {"token": token_probe(addr, int(port))}
    for target in targets:
        addr, port = target.rsplit(":", 1)
        port = int(port)
        found[target] = {
            "get": status(addr, port, "GET", "/global/0"),
            "put": status(addr, port, "PUT", "/global/0", b"0"),
            "delete": status(addr, port, "DELETE", "/global/0"),
            "rank_and_size": status(addr, port, "GET", "/rank_and_size/198.18.213.2:0"),
            "pickle": status(addr, port, "PUT", "/worker_addresses/198.18.213.2:0", pickled),
        }
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
