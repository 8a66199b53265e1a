"""Run under horovodrun: records where this rank runs, then is train_and_report.py.

    host_and_report.py REPORT_DIR WORKDIR CONFIG [section.key=value ...]

Writes REPORT_DIR/host<rank>.json (hostname, what it resolves to, the addresses of
HOROVOD_GLOO_IFACE, the network namespace) before training, then everything
train_and_report.py writes.
"""
import json
import os
import runpy
import socket
import sys

import psutil

here = os.path.dirname(os.path.abspath(__file__))
report_dir = sys.argv[1]
rank = int(os.environ["HOROVOD_RANK"])
iface = os.environ.get("HOROVOD_GLOO_IFACE", "")
hostname = socket.gethostname()
where = {
    "rank": rank,
    "hostname": hostname,
    "hostname_resolves_to": socket.gethostbyname(hostname),
    "iface": iface,
    "iface_addrs": [a.address for a in psutil.net_if_addrs().get(iface, []) if a.family == socket.AF_INET],
    "netns": os.readlink("/proc/self/ns/net"),
    "horovod_hostname": os.environ.get("HOROVOD_HOSTNAME"),
    "cwd": os.getcwd(),
}
os.makedirs(report_dir, exist_ok=True)
with open(os.path.join(report_dir, f"host{rank}.json"), "w") as f:
    json.dump(where, f)

sys.argv = [os.path.join(here, "train_and_report.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
