"""tools/reference_docs.py: docs/config-reference.md is the schema's, docs/commands.md the parsers',
docs/spark-reference.md the Spark estimator's, run's and SparkBackend's, docs/callbacks-reference.md the callbacks',
line for line; and each parameter or argument in them has a meaning."""
import importlib.util
import os
import re
import subprocess
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


def _section(text, heading):
    """The lines of ``text`` under ``## heading``, to the next such heading."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _row(text, name):
    """The cells of the table row of ``name`` in ``text``."""
    line = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_every_public_callback_and_each_of_its_arguments_has_its_meaning_in_the_reference():
    publics = TOOL.public_callbacks()
    exported = TOOL.module_constants(os.path.join("hvdkeras", "callbacks", "__init__.py"))["__all__"]
    assert [p.name for p in publics] == exported
    assert TOOL.undocumented_arguments() == [], "give each of these arguments an entry in its docstring's Args"
    text = open(os.path.join(REPO, TOOL.CALLBACKS_REFERENCE)).read()
    for public in publics:
        section = _section(text, f"`{public.name}`")
        assert public.summary and public.summary in section
        if public.keras:
            assert f"those of Keras' `{public.keras}`" in section
        for argument in public.arguments:
            assert _row(section, argument.name)[2] == TOOL._cell(argument.meaning)
    # what the callbacks add to Keras' and Horovod's arguments, with their defaults
    backup = _section(text, "`BackupAndRestore`")
    assert _row(backup, "grace_s")[1] == "`30.0`" and _row(backup, "backup_dir")[1] == "(required)"
    assert _row(_section(text, "`BroadcastGlobalVariablesCallback`"), "root_rank")[1] == "`0`"  # distributed.ROOT_RANK
    assert "keras.callbacks.TensorBoard" in _section(text, "`TensorBoard`")  # made by chief_only's factory


def test_an_argument_without_an_args_entry_is_named(tmp_path, monkeypatch):
    module = tmp_path / "hvdkeras" / "callbacks"
    module.mkdir(parents=True)
    (module / "__init__.py").write_text('from hvdkeras.callbacks.one import One\n__all__ = ["One"]\n')
    (module / "one.py").write_text(
        'class One(keras.callbacks.Callback):\n    """Does one thing.\n\n    Args:\n        first: the first.\n'
        '            Its second line.\n\n    Returns:\n        second: not an argument.\n    """\n\n'
        '    def __init__(self, first, second=2, *, third=None):\n        pass\n')
    monkeypatch.setattr(TOOL, "REPO", str(tmp_path))
    [one] = TOOL.public_callbacks()
    assert [(a.name, a.default, a.meaning) for a in one.arguments] == [
        ("first", "", "the first. Its second line."), ("second", "2", ""), ("third", "None", "")]
    assert TOOL.undocumented_arguments() == ["One(second)", "One(third)"]
    assert f"| `second` | `2` | {TOOL.UNDOCUMENTED} |" in TOOL.callbacks_reference()


def test_every_argument_of_run_and_spark_backend_is_in_the_reference_with_a_meaning():
    text = open(os.path.join(REPO, TOOL.SPARK_REFERENCE)).read()
    for what, heading in ((TOOL.SPARK_RUN, "hvdkeras.spark.run"), (TOOL.SPARK_BACKEND, "SparkBackend")):
        args = TOOL.spark_arguments(what)
        assert [a.name for a in args if not a.meaning] == [], f"give these arguments of {heading} an Args entry"
        section = _section(text, heading)
        for argument in args:
            assert _row(section, argument.name)[2] == TOOL._cell(argument.meaning)
    assert {a.name for a in TOOL.spark_arguments(TOOL.SPARK_BACKEND)} >= {"num_proc", "start_timeout", "use_gloo"}


def test_run_takes_horovods_arguments_in_horovods_order_and_the_estimator_every_parameter():
    horovod = TOOL.module_constants(TOOL.SPARK_PARAMS)["HOROVOD_DEFAULTS"]
    ours = [a.name for a in TOOL.spark_arguments(TOOL.SPARK_RUN)]
    assert ours[:len(horovod["run"])] == list(horovod["run"])
    params = TOOL.module_constants(TOOL.SPARK_PARAMS)
    taken = {p[0] for p in params["ESTIMATOR_PARAMS"]} | set(params["REFUSED"])
    assert set(horovod["KerasEstimator"]) - taken == set()
    assert set(horovod["KerasModel"]) <= {p[0] for p in params["MODEL_PARAMS"]}


def test_where_a_default_differs_from_horovods_the_reference_says_both():
    text = open(os.path.join(REPO, TOOL.SPARK_REFERENCE)).read()
    run = _section(text, "hvdkeras.spark.run")
    timeout = _row(run, "start_timeout")
    assert "default 120" in timeout[2] and "else 600 s" in timeout[3]  # ours 120 s, Horovod's 600 s
    gloo = _row(run, "use_gloo")
    assert "Gloo (the default)" in gloo[2] and "MPI when Horovod was built with it" in gloo[3]
    assert _row(run, "max_retries")[3] == "hvdkeras only"
    assert _row(run, "verbose")[3] == "same"
    estimator = _section(text, "KerasEstimator")
    assert _row(estimator, "backend_env")[3] == "`{'LIBHDFS_OPTS': '-Xms2048m -Xmx2048m'}`"
    assert _row(estimator, "batch_size")[3] == "same"
    assert "`executable`" in _section(text, "SparkBackend")  # Horovod's passes it on to horovod.spark.run
    assert TOOL.horovod_cell("None", ("None", "")) == "same"
    assert TOOL.horovod_cell("None", ("[]", "")) == "`[]`"
    assert TOOL.horovod_cell("None", ("None", "600 s")) == "`None` too: 600 s"
    assert TOOL.horovod_cell("0", None) == "hvdkeras only"


def test_a_docstrings_args_are_read_entry_by_entry():
    doc = ("Summary.\n\nArgs:\n    a: first (int):\n        and more.\n    b (str): second.\n    **kw: the rest.\n\n"
           "Returns:\n    c: not an argument.")
    assert TOOL.docstring_args(doc) == {"a": "first (int): and more.", "b": "second.", "**kw": "the rest."}
    assert TOOL._markdown(":class:`~a.b.C` and :func:`x.y` and ``z``") == "`C` and `x.y` and `z`"


def test_the_spark_and_callback_references_import_nothing_heavy():
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('r', 'tools/reference_docs.py');"
            " m = importlib.util.module_from_spec(spec); sys.modules['r'] = m; spec.loader.exec_module(m);"
            " m.spark_reference(); m.callbacks_reference();"
            " print(sorted(n for n in ('tensorflow', 'keras', 'pyspark', 'horovod') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=120)
    assert out.stdout.strip() == "[]"
