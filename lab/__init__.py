"""The benchmark's lab: two to eight emulated hosts on this machine, joined by links of a chosen speed.

* :mod:`~lab.hosts`: two to eight network namespaces on a bridge, each with its own
  sshd, hostname and share of the cores (also the multi-host tests' hosts);
* :mod:`~lab.shaper`: the link's speed, a token-bucket shaper on both
  ends of every host's link, applied and removed by the lab itself.

Needs root; :func:`lab.hosts.can_run` says why not where it cannot run.
"""
