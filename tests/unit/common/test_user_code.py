"""hvdkeras.common.user_code: a piece of one's own named as package.module:function, each failure one line naming
the key."""
import sys
import textwrap

import pytest

from hvdkeras.common import user_code
from hvdkeras.common.errors import ConfigError
from hvdkeras.config import is_import_path


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    """A folder holding ``own_pieces.py`` (the config file's folder, not on sys.path); sys.path and the module
    cache are restored afterwards."""
    (tmp_path / "own_pieces.py").write_text(textwrap.dedent("""
        LIMIT = 3

        def build(units=4):
            return ("built", units)

        class Thing:
            pass
    """))
    (tmp_path / "broken_pieces.py").write_text("import numpy\nraise RuntimeError('no GPU found\\nsecond line')\n")
    (tmp_path / "needs_missing.py").write_text("import package_nobody_installed\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("own_pieces", "broken_pieces", "needs_missing"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_import_paths_are_told_from_builtin_and_tfds_names():
    assert is_import_path("own_pieces:build") and is_import_path("a.b.c:make.model")
    assert not is_import_path("small_cnn") and not is_import_path("applications.ResNet50")
    assert not is_import_path("cifar10:3.0.2") and not is_import_path("mnist:3.*.*")  # TFDS name:version
    assert not is_import_path(None)


def test_a_function_is_found_in_the_config_files_folder(own_module):
    build = user_code.resolve("own_pieces:build", "model.name", "c.yaml", str(own_module))
    assert build(units=8) == ("built", 8)
    assert sys.path[-1] == str(own_module)  # after everything already there: PYTHONPATH wins
    assert user_code.resolve("own_pieces:Thing", "trainer.metrics", None, str(own_module)).__name__ == "Thing"


@pytest.mark.parametrize("spec, what", [
    ("own_pieces", "a module path, a colon, then the function's name"),
    ("own_pieces:", "a module path, a colon, then the function's name"),
    ("own-pieces:build", "a module path, a colon, then the function's name"),
    ("nowhere_module:build", "module nowhere_module was not found on PYTHONPATH or in {folder}"),
    ("own_pieces:missing", "module own_pieces has no missing"),
    ("own_pieces:LIMIT", "LIMIT is an int, not callable"),
    ("broken_pieces:build", "importing broken_pieces failed: RuntimeError: no GPU found"),
    ("needs_missing:build", "importing needs_missing failed: ModuleNotFoundError: No module named"
                            " 'package_nobody_installed'"),
])
def test_each_failure_is_one_line_naming_the_key_its_source_and_the_value(own_module, spec, what):
    with pytest.raises(ConfigError) as err:
        user_code.resolve(spec, "model.name", "configs/mine.yaml", str(own_module))
    message = str(err.value)
    assert "\n" not in message
    assert message == (f"model.name in configs/mine.yaml must name a callable as package.module:function"
                       f" ({what.format(folder=own_module)}); received: {spec!r}")
