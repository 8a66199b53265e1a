"""hvdkeras: correct-by-default data-parallel Keras training on Horovod."""
import pathlib

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent


def pinned_requirements():
    """Requirements pinned in constraints.txt, the one tested set.

    cmake and pytest are build/test tools, not runtime requirements. Horovod is
    listed but must be built from source against the installed TensorFlow
    (`make install` does that); pip cannot do it for you with build isolation.
    """
    tools = {"cmake", "pytest"}
    reqs = []
    for line in (HERE / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and line.split("==")[0].lower() not in tools:
            reqs.append(line)
    return reqs


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
