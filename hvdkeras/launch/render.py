"""One plan, one launcher: the command or file text, and what ``--dry_run_output`` writes."""
from __future__ import annotations

from hvdkeras.launch.common import DEFAULT_IMAGE, check_launcher
from hvdkeras.launch.horovodrun import horovodrun_command
from hvdkeras.launch.kubernetes import kubernetes_manifest
from hvdkeras.launch.mpirun import mpirun_command
from hvdkeras.launch.plan import Plan
from hvdkeras.launch.slurm import slurm_script


def render_command(p: Plan, launcher: str = "horovodrun", image: str = DEFAULT_IMAGE) -> str:
    """The exact command (horovodrun, mpirun) or file text (slurm: sbatch script; kubernetes: MPIJob YAML)."""
    check_launcher(launcher)
    if launcher == "horovodrun":
        return horovodrun_command(p)
    if launcher == "mpirun":
        return mpirun_command(p)
    if launcher in ("slurm", "slurm-srun"):
        return slurm_script(p, srun=launcher == "slurm-srun")
    return kubernetes_manifest(p, image)


def launch_file(p: Plan, launcher: str = "horovodrun", image: str = DEFAULT_IMAGE) -> str:
    """What ``--dry_run_output`` writes: the command as a bash script, or the sbatch script / YAML itself."""
    text = render_command(p, launcher, image)
    if launcher in ("horovodrun", "mpirun"):
        return "#!/bin/bash\nset -euo pipefail\n" + text + "\n"
    return text
