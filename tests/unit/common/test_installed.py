"""hvdkeras.common.installed: where a named module would load from, found without running it."""
import os
import sys

import pytest

from hvdkeras.common import installed
from hvdkeras.common.errors import SetupError


@pytest.fixture
def cwd_first(tmp_path, monkeypatch):
    """The working directory ``tmp_path``, first on sys.path, as in ``python -c``, a notebook or a pyspark shell."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n.split(".")[0] in ("planted", "nsplanted", "json_shadow")]:
        del sys.modules[name]


def test_a_module_in_the_working_directory_a_namespace_package_or_a_package_is_found_without_running_it(cwd_first):
    marker = cwd_first / "RAN"
    code = f"open({str(marker)!r}, 'w').close()\n"
    (cwd_first / "planted.py").write_text(code)
    (cwd_first / "nsplanted" / "deep").mkdir(parents=True)
    (cwd_first / "nsplanted" / "deep" / "mod.py").write_text(code)
    assert installed.not_installed("planted") == str(cwd_first / "planted.py")
    assert installed.not_installed("nsplanted.deep.mod") == str(cwd_first / "nsplanted")
    with pytest.raises(SetupError) as err:
        installed.check("nsplanted.deep.mod", "metadata's $import 'nsplanted.deep.mod:x'")
    assert str(err.value).startswith(f"metadata's $import 'nsplanted.deep.mod:x' names module 'nsplanted.deep.mod',"
                                     f" found in {cwd_first / 'nsplanted'}, which no installed package holds")
    assert "import nsplanted yourself before loading" in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_the_standard_library_installed_distributions_and_imported_modules_pass(cwd_first):
    for module in ("json.decoder", "xml.dom.minidom", "yaml", "numpy.linalg", "hvdkeras.report", "missing_module.x",
                   "os"):
        assert installed.not_installed(module) is None, module
    (cwd_first / "planted.py").write_text("")
    import planted  # noqa: F401  the user imported it: it runs nothing new

    assert installed.not_installed("planted") is None


def test_a_folder_shadowing_an_installed_package_in_the_working_directory_is_refused(cwd_first):
    (cwd_first / "yaml").mkdir()
    (cwd_first / "yaml" / "__init__.py").write_text("")
    saved = sys.modules.pop("yaml")
    try:
        assert installed.not_installed("yaml") == str(cwd_first / "yaml" / "__init__.py")
    finally:
        sys.modules["yaml"] = saved
    assert os.path.exists(cwd_first / "yaml")
