"""hvdkeras: correct-by-default data-parallel Keras training on Horovod.

`pip install hvdkeras` does not install TensorFlow or Horovod: you bring TensorFlow
(tensorflow, tensorflow-cpu or tensorflow[and-cuda], 2.15 to 2.21), then
`python -m hvdkeras.build_horovod` builds Horovod 0.28.1 against it. The exact tested
sets are stacks/<name>/constraints.txt; `make install` installs one of them.
"""
from setuptools import find_packages, setup

setup(
    name="hvdkeras",
    version="0.1.0",
    description="Keras/TensorFlow data-parallel training on Horovod, correct by default.",
    packages=find_packages(include=["hvdkeras", "hvdkeras.*"]),
    package_data={"hvdkeras.build_horovod": ["patches/*.patch"]},
    python_requires=">=3.11,<3.12",
    # What hvdkeras imports, plus Horovod's own runtime requirements (its wheel is installed without them).
    install_requires=["numpy", "PyYAML", "scikit-learn", "absl-py", "psutil", "cloudpickle", "packaging"],
    extras_require={
        "tfds": ["tensorflow-datasets"],   # TFDS datasets (ImageNet, CIFAR, MNIST configs)
        "report": ["matplotlib"],          # python -m hvdkeras.report, hvdkeras.bench charts
        "test": ["pytest"],
    },
    entry_points={"console_scripts": ["hvdkeras-train=hvdkeras.train:run",
                                      "hvdkeras-build-horovod=hvdkeras.build_horovod.__main__:main"]},
)
