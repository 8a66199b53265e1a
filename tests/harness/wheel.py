"""hvdkeras's wheel built from the project's tracked files, as a clone has them: ``build_wheel(folder)``."""
import pathlib
import shutil
import subprocess
import sys

from tests.harness.ranks import REPO


def build_wheel(folder: pathlib.Path) -> pathlib.Path:
    """Copies the tracked files (symlinks as symlinks: ``configs/`` links to ``hvdkeras/resources/configs``) into
    ``folder/src`` and builds the wheel there with pip, offline; returns the wheel's path in ``folder``."""
    src = folder / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f"{REPO}/{name}", target, follow_symlinks=False)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(folder), str(src)], check=True, capture_output=True, timeout=300)
    (built,) = folder.glob("hvdkeras-*.whl")
    return built
