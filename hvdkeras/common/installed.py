"""Whether a module named by a file from outside comes from an installed package, found without running it.

A saved model names code to load: an ``$import`` path in a Spark model's ``metadata``, a ``module``
in a Keras archive's ``config.json``. Importing a module runs it, and Python finds modules in the
working directory first, then in every folder on ``sys.path``; a namespace package needs no
``__init__.py``. So a folder that ships a ``payload.py`` beside what it saves could run it in
whoever loads it. :func:`not_installed` finds where the module would come from, the way the
import system does but without executing anything, and says so unless that place is the
standard library's, an installed distribution's (site-packages), or an editable install's own
project folder for the packages that project provides. No TensorFlow here.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import site
import sys
import sysconfig
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from hvdkeras.common.errors import SetupError


@functools.lru_cache(maxsize=1)
def _installed_roots() -> Tuple[str, ...]:
    """The folders whose modules are installed: the standard library's and the site-packages folders."""
    paths = sysconfig.get_paths()
    roots = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    roots += list(getattr(site, "getsitepackages", lambda: [])())
    if site.ENABLE_USER_SITE:
        roots.append(site.getusersitepackages())
    roots += [os.path.dirname(p) for p in (getattr(sys, "_stdlib_dir", None),) if p]
    return tuple(sorted({os.path.realpath(r) for r in roots if r}))


@functools.lru_cache(maxsize=1)
def _editable_roots() -> Dict[str, FrozenSet[str]]:
    """``{top-level package: the project folders of the editable installs that provide it}``."""
    provides = importlib.metadata.packages_distributions()
    roots: Dict[str, Set[str]] = {}
    for top, names in provides.items():
        for name in names:
            try:
                text = importlib.metadata.distribution(name).read_text("direct_url.json")
                record = json.loads(text) if text else {}
            except (importlib.metadata.PackageNotFoundError, ValueError):
                continue
            url = record.get("url", "") if isinstance(record, dict) else ""
            if (record.get("dir_info") or {}).get("editable") and url.startswith("file://"):
                roots.setdefault(top, set()).add(os.path.realpath(url[len("file://"):]))
    return {top: frozenset(found) for top, found in roots.items()}


def _under(path: str, roots: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _places(spec: importlib.machinery.ModuleSpec) -> List[str]:
    """The files or folders a spec loads from (a namespace package: each of its folders)."""
    if spec.origin in ("built-in", "frozen"):
        return []
    if spec.submodule_search_locations is not None and (spec.origin is None or spec.origin == "namespace"):
        return list(spec.submodule_search_locations)
    return [spec.origin] if spec.origin else []


def not_installed(module: str) -> Optional[str]:
    """Where importing ``module`` would load code that no installed package holds (a file or folder); None when it
    is already imported, or every part of its dotted path is the standard library's, an installed distribution's
    or an editable install's own.

    Nothing is imported or executed: the parts are looked up with the import system's path finder (a package
    already imported is looked up in its own ``__path__``). A module that is not found anywhere is None too:
    importing it fails without running anything.
    """
    if module in sys.modules:
        return None
    parts = module.split(".")
    top = parts[0]
    allowed = _installed_roots() + tuple(_editable_roots().get(top, ()))
    search: Optional[List[str]] = None
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        loaded = sys.modules.get(name)
        if loaded is not None:
            spec = getattr(loaded, "__spec__", None)
        elif i == 0:
            spec = _find_top(name)
        else:
            spec = importlib.machinery.PathFinder.find_spec(name, search)
        if spec is None:
            return None
        if loaded is None:
            outside = [p for p in _places(spec) if not _under(p, allowed)]
            if outside:
                return outside[0]
        search = list(getattr(loaded, "__path__", None) or spec.submodule_search_locations or [])
    return None


def _find_top(name: str) -> Optional[importlib.machinery.ModuleSpec]:
    """The spec the import system would use for top-level ``name``: each finder on ``sys.meta_path`` in turn (an
    editable install's finder among them), none of which runs the module."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, None)
        except (ImportError, ValueError, TypeError):
            continue
        if isinstance(spec, importlib.machinery.ModuleSpec):
            return spec
    return None


def check(module: str, named_by: str) -> None:
    """Raises a one-line :class:`SetupError` when ``module`` would load code from outside the installed packages.

    Args:
        module: the module's dotted name, as the file names it.
        named_by: what names it, for the message (e.g. ``"model/metadata's $import"``).
    """
    where = not_installed(module)
    if where is not None:
        raise SetupError(f"{named_by} names module {module[:120]!r}, found in {where[:200]}, which no installed package"
                         " holds (the working directory, the saved folder or another folder on sys.path): only"
                         " installed packages are imported when a saved model loads; install the package that"
                         f" defines it (pip install), or import {module.split('.')[0]} yourself before loading if you"
                         " trust that folder")
