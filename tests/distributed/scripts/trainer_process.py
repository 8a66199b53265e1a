"""Run under horovodrun, first in a shared job: sets the process up as the trainer sets it up, before anything else.

    python trainer_process.py [CONFIG [section.key=value ...]]      # (run_scripts.py's first script)

``distributed.init`` with the config's ``runtime`` and ``horovod`` sections (the default config's
without CONFIG): Horovod's settings before ``hvd.init``, TensorFlow's thread budget before its runtime
starts, each rank on its block of the cores. A trainer that runs later in the same process finds the
process as in a job of its own; after a bare ``hvd.init`` (a check script's) it would train with
TensorFlow's default thread pools bound to one core and Horovod's own polling loop beside them, 2-3 times
slower. :func:`setup` does the same from a script's own top.
"""
import sys

from hvdkeras import config as config_lib
from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # as the command lines import TensorFlow: quiet, matplotlib at its first use

from hvdkeras.runtime import distributed


def setup(config_path=None, overrides=()):
    """Initialises this process for the config at ``config_path`` (None: the defaults) as the trainer does."""
    cfg = config_lib.load(config_path, list(overrides))
    return distributed.init(cfg.runtime, horovod_cfg=cfg.horovod)


if __name__ == "__main__":
    setup(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2:])
