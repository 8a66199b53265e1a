"""``python -m hvdkeras.launch --mpirun-flags [--gpus]``: prints the mpirun flags (for the Makefile)."""
from hvdkeras.launch.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
