"""The Slurm test cluster's pure parts (lab/slurm.py): its config and how down() finds daemons."""
import os

from lab import slurm


def test_slurm_conf_names_both_nodes_the_controller_and_keeps_everything_in_the_folder(tmp_path):
    folder = str(tmp_path / slurm.FOLDER)
    text = slurm.slurm_conf(folder, [("hvd-host-a", "198.18.213.2"), ("hvd-host-b", "198.18.213.3")], 2,
                            ("vm", "198.18.213.1"))
    conf = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith(("NodeName", "Partition")))
    assert conf["SlurmctldHost"] == "vm(198.18.213.1)"
    assert (conf["ProctrackType"], conf["TaskPlugin"]) == ("proctrack/linuxproc", "task/none")  # no cgroups
    assert conf["AuthInfo"] == f"socket={slurm.MUNGE_DIR}/munge.socket"
    for key in ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile",
                "SlurmdLogFile"):
        assert conf[key].startswith(folder + os.sep), key  # nothing written outside the cluster's folder
    assert "NodeName=hvd-host-a NodeAddr=198.18.213.2 CPUs=2 State=UNKNOWN" in text
    assert "NodeName=hvd-host-b NodeAddr=198.18.213.3 CPUs=2 State=UNKNOWN" in text
    assert f"PartitionName={slurm.PARTITION} Nodes=hvd-host-a,hvd-host-b Default=YES" in text
    assert (int(conf["SlurmctldPort"]), int(conf["SlurmdPort"])) != (6817, 6818)  # clear of a real Slurm


def test_down_finds_only_daemons_that_name_a_cluster_folder(monkeypatch):
    class Proc:
        def __init__(self, pid, cmdline):
            self.info = {"pid": pid, "cmdline": cmdline}

    import psutil

    procs = [Proc(1, ["/usr/sbin/slurmd", "-D", "-N", "hvd-host-a", "-f", f"/tmp/x/{slurm.FOLDER}/slurm.conf"]),
             Proc(2, ["/usr/sbin/slurmctld", "-f", "/etc/slurm/slurm.conf"]),  # a real cluster's: left alone
             Proc(3, ["/usr/sbin/munged", f"--socket={slurm.MUNGE_DIR}/munge.socket"]),
             Proc(4, ["python", f"/tmp/x/{slurm.FOLDER}/job.py"]),
             Proc(5, None)]
    monkeypatch.setattr(psutil, "process_iter", lambda attrs=None: iter(procs))
    assert slurm._daemon_pids() == [1, 3]
