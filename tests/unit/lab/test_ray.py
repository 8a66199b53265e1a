"""The Ray test cluster's pure parts (lab/ray.py): which folders in /tmp down() removes after a killed run."""
import os
import shutil
import tempfile

from lab import ray as ray_lab


def test_down_sweeps_only_the_ray_folders_a_killed_run_left():
    ray_folder = tempfile.mkdtemp(prefix=ray_lab.FOLDER + "-", dir="/tmp")  # Ray's --temp-dir: session_latest
    os.symlink(os.path.join(ray_folder, "session_2026"), os.path.join(ray_folder, "session_latest"))
    other = tempfile.mkdtemp(prefix=ray_lab.FOLDER + "-", dir="/tmp")  # a run's own folder: no Ray session in it
    try:
        left = ray_lab._left_ray_folders()
        assert ray_folder in left
        assert other not in left
    finally:
        shutil.rmtree(ray_folder)
        shutil.rmtree(other)
