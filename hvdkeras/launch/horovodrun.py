"""``horovodrun``: the README's recipe, and its elastic form with a hosts file and host discovery."""
from __future__ import annotations

import shlex

from hvdkeras import discover_hosts
from hvdkeras.launch.common import TRAIN_MODULE, shell, uses_gloo
from hvdkeras.launch.hosts import hosts_text
from hvdkeras.launch.plan import Plan


def horovodrun_command(p: Plan) -> str:
    """``horovodrun -np N -H a:4,b:4 [--gloo] python -m hvdkeras.train ...`` (README's recipe).

    With ``elastic.enabled``: README's elastic recipe, a hosts file read by
    ``python -m hvdkeras.discover_hosts`` and ``--min-np``/``--max-np`` from the config.
    """
    e = p.config.elastic
    if e.enabled:
        lines = "".join(f"{h.name}:{h.slots}\\n" for h in p.hosts)
        limits = ["--min-np", str(e.min_np)] + (["--max-np", str(e.max_np)] if e.max_np else [])
        keepalive = ("# across hosts, ssh keepalives let the driver drop a host whose link is down:\n"
                     "# ServerAliveInterval 3 and ServerAliveCountMax 3 in ~/.ssh/config (docs/elastic.md)\n"
                     if len(p.hosts) > 1 else "")
        discovery = ["--host-discovery-script", shlex.quote(discover_hosts.COMMAND)]
        return (keepalive + f"printf '{lines}' > hosts.txt\n"
                + shell(["HVDKERAS_HOSTS_FILE=hosts.txt", "horovodrun", "-np", str(p.np)] + limits
                         + discovery + list(TRAIN_MODULE), p.train_args))
    fixed = ["horovodrun", "-np", str(p.np), "-H", hosts_text(p.hosts)] + (["--gloo"] if uses_gloo(p) else [])
    return shell(fixed + list(TRAIN_MODULE), p.train_args)
