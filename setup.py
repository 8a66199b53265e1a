"""hvdkeras: correct-by-default data-parallel Keras training on Horovod."""
import os
import pathlib

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent
# tools/install_stack.sh says which stack (stacks/<name>/) it installs; keras2 is the default.
STACK = HERE / "stacks" / os.environ.get("HVDKERAS_STACK", "keras2")

def _names(path):
    lines = (line.split("#", 1)[0].strip() for line in pathlib.Path(path).read_text().splitlines())
    return [line for line in lines if line]


def pinned_requirements():
    """Each direct requirement pinned as in the stack's constraints.txt, its one tested set.

    Horovod must be built from source against the installed TensorFlow, without
    build isolation; `make install` does that before installing this package.
    """
    pins = {}
    for line in (STACK / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.lower()] = version
    return [f"{name}=={pins[name.lower()]}" for name in _names(STACK / "requirements.txt") + ["horovod"]]


setup(
    name="hvdkeras",
    version="0.1.0",
    description="Keras/TensorFlow data-parallel training on Horovod, correct by default.",
    packages=find_packages(include=["hvdkeras", "hvdkeras.*"]),
    python_requires=">=3.11,<3.12",
    install_requires=pinned_requirements(),
    extras_require={"test": ["pytest"]},
    entry_points={"console_scripts": ["hvdkeras-train=hvdkeras.train:run"]},
)
