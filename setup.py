"""A shim for tools and habits that call ``setup.py``: everything is declared in ``pyproject.toml``.

``pip install .``, ``pip install -e .`` and ``python setup.py --version`` read the same metadata; nothing here
adds to it.
"""
from setuptools import setup

setup()
