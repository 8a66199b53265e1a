"""mypy's strict modules (pyproject.toml's [tool.mypy]) are the layer without TensorFlow, as docs/architecture.md
draws it (a module moved into or out of that table is checked strictly, or not, without a second list to edit),
and the public API of a run."""
import os
import tomllib

from tests.unit.test_layers import PROGRAMS, REPO, SECTIONS, _doc_rows, _modules, _row_of

# What `mypy --strict` turns on, minus the flags mypy takes only globally (warn_redundant_casts, set there).
STRICT_FLAGS = {"disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls",
                "disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_decorators",
                "warn_return_any", "no_implicit_reexport", "strict_equality", "extra_checks"}


# Besides the layer without TensorFlow, the public API of a run is strict: where it is and how it resumes, its one
# assembly, the trainer, the drivers and their contract, and the task interface.
PUBLIC_API = {"hvdkeras.runtime.position", "hvdkeras.training.assembly", "hvdkeras.training.trainer",
              "hvdkeras.training.drivers", "hvdkeras.training.drivers.loop", "hvdkeras.training.drivers.plain",
              "hvdkeras.training.drivers.elastic", "hvdkeras.training.tasks"}


def _mypy():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def _strict_section():
    (section,) = [o for o in _mypy()["overrides"] if o.get("disallow_untyped_defs")]
    return section


def _matches(module, pattern):
    """mypy's module patterns: ``a.b.*`` is ``a.b`` and every module under it."""
    if pattern.endswith(".*"):
        return module == pattern[:-2] or module.startswith(pattern[:-1])
    return module == pattern


def test_mypy_is_strict_on_exactly_the_layer_without_tensorflow():
    rows = _doc_rows()
    modules = [name for name in _modules() if name != "hvdkeras"]
    light = {name for name in modules if name not in PROGRAMS and rows[_row_of(name, rows)[0]][0] == SECTIONS[0]}
    patterns = _strict_section()["module"]
    strict = {name for name in modules if any(_matches(name, p) for p in patterns)}
    assert not light - strict, f"add to pyproject.toml's strict mypy modules: {sorted(light - strict)}"
    extra = strict - light - PUBLIC_API
    assert not extra, f"strict in pyproject.toml but neither in the first table nor the public API: {sorted(extra)}"
    assert PUBLIC_API <= strict, f"the public API is not strict: {sorted(PUBLIC_API - strict)}"
    unused = [p for p in patterns if not any(_matches(name, p) for name in modules)]
    assert not unused, f"pyproject.toml's strict mypy modules name no module: {unused}"


def test_the_strict_section_sets_every_strict_flag_and_mypy_checks_the_package():
    section = _strict_section()
    assert {flag for flag in STRICT_FLAGS if section.get(flag) is True} == STRICT_FLAGS
    assert "strict" not in section  # in an override section it would apply to every module
    tool = _mypy()
    assert tool["files"] == ["hvdkeras"] and tool["check_untyped_defs"] is True
