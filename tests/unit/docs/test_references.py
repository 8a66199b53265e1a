"""tools/reference_docs.py: docs/config-reference.md is the schema's, docs/commands.md the parsers', line for line."""
import importlib.util
import os
import re
import sys

import pytest

from hvdkeras.config import schema
from tests.unit.helpers import REPO


def _tool():
    spec = importlib.util.spec_from_file_location("reference_docs", os.path.join(REPO, "tools", "reference_docs.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


TOOL = _tool()


@pytest.mark.parametrize("name", sorted(TOOL.GENERATORS))
def test_the_generated_reference_is_what_the_code_says(name):
    text = open(os.path.join(REPO, name)).read()
    assert text == TOOL.GENERATORS[name](), f"{name} differs from the code: run python tools/reference_docs.py"


def test_every_config_key_is_in_the_reference_with_a_meaning():
    rows = TOOL.config_keys()
    keys = {row[0] for row in rows}
    for section in schema.fields(schema.Config):
        cls = type(getattr(schema.Config(), section.name))
        assert {f"{section.name}.{f.name}" for f in schema.fields(cls)} <= keys
    assert [row[0] for row in rows if not row[4]] == [], "give each of these keys a comment in schema.py"
    text = open(os.path.join(REPO, TOOL.CONFIG_REFERENCE)).read()
    assert "| `data.eval_global_batch_size` | int or null | `null` |" in text  # one the issue found in no doc


def test_a_field_comment_is_the_one_above_it_else_the_one_after_it(tmp_path):
    path = tmp_path / "s.py"
    path.write_text("class C:\n    # one\n    # two\n    a: int = 1  # not this\n    b: int = 2  # three\n"
                    "\n    c: int = 3\n")
    assert TOOL.field_comments(str(path)) == {("C", "a"): "one two", ("C", "b"): "three"}


def _command_modules():
    """Every module of the package that runs as a command: python -m <module>."""
    found = set()
    for root, _, files in os.walk(os.path.join(REPO, "hvdkeras")):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".py") and re.search(r'^if __name__ == "__main__":', open(path).read(), flags=re.M):
                module = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                found.add(module.removesuffix(".__main__"))
    return found


def test_every_command_line_and_console_script_has_its_section():
    text = open(os.path.join(REPO, TOOL.COMMANDS_REFERENCE)).read()
    documented = set(re.findall(r"^## `python -m (\S+)`$", text, flags=re.M))
    assert _command_modules() - {"hvdkeras.build_horovod.smoke_check"} <= documented
    assert {"hvdkeras.train", "hvdkeras.evaluate", "hvdkeras.report", "hvdkeras.input_bench",
            "hvdkeras.build_horovod", "hvdkeras.discover_hosts", "hvdkeras.launch"} <= documented
    for script in TOOL.console_scripts():
        assert f"console script `{script}`" in text
    for flag in ("--fresh", "--resume={auto,force}", "--workdir=WORKDIR", "--dry_run"):
        assert f"| `{flag}` |" in text
