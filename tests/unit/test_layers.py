"""The package's layers: dependencies point one way, and the light layers stay light."""
import ast
import os
import subprocess
import sys

import pytest

import hvdkeras

PACKAGE_DIR = os.path.dirname(os.path.abspath(hvdkeras.__file__))
REPO = os.path.dirname(PACKAGE_DIR)
# The folders of Python the repository runs: no module pair in them imports each other, even for types only.
CYCLE_FREE = ("hvdkeras", "benchmarks", "lab", "tools")


def _module_name(path):
    rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _modules(folders=("hvdkeras",)):
    found = {}
    for folder in folders:
        for root, dirs, files in os.walk(os.path.join(REPO, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    found[_module_name(path)] = path
    return found


def _imports(name, path, modules):
    """The modules of ``modules`` that ``name`` imports anywhere in its file, function level and
    ``if TYPE_CHECKING:`` included."""
    tree = ast.parse(open(path).read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            # `import a.b.c` runs a, a.b and a.b.c: each package on the way is a dependency.
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                candidate = ".".join(parts[:i])
                if candidate in modules and candidate != name and not name.startswith(candidate + "."):
                    out.add(candidate)
    return out


def _graph(folders=("hvdkeras",)):
    modules = _modules(folders)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph):
    """One import cycle as a list of modules, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_repository_has_no_import_cycle():
    graph = _graph(CYCLE_FREE)
    # the parser sees every folder, the soak's modules and the tools' scripts included
    assert len(graph) > 30 and "hvdkeras.training.trainer" in graph
    assert {"benchmarks.soak.accounting", "benchmarks.soak.elastic", "lab.slurm", "tools.fp16_accuracy"} <= set(graph)
    assert {"lab.hosts", "hvdkeras.common.processes"} <= graph["lab.slurm"]  # edges in a folder and across them
    assert "benchmarks.soak.records" in graph["benchmarks.soak.elastic"]
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_an_import_for_types_only_is_an_edge(tmp_path):
    path = tmp_path / "a.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    assert _imports("pkg.a", str(path), {"pkg.a": str(path), "pkg.b": ""}) == {"pkg.b"}


def test_the_top_of_the_package_holds_at_most_ten_modules():
    top = sorted(f for f in os.listdir(PACKAGE_DIR) if f.endswith(".py") and f not in ("__init__.py", "__main__.py"))
    assert len(top) <= 10, f"{len(top)} modules at the top of hvdkeras/ (folders name the layers): {top}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("layer, allowed", [
    ("hvdkeras.common.errors", set()),
    ("hvdkeras.config", {"hvdkeras.common", "hvdkeras.common.errors"}),
    ("hvdkeras.common.registry", {"hvdkeras.common.errors"}),
])
def test_bottom_layers_import_only_what_is_below_them(layer, allowed):
    graph = _graph()
    for name, deps in graph.items():
        if name == layer or name.startswith(layer + "."):
            outside = {d for d in deps if not d.startswith(layer + ".") and d != layer} - allowed
            assert not outside, f"{name} imports {sorted(outside)}"


def _heavy_modules_after(code):
    """The TensorFlow, Keras, Horovod and TFDS modules a fresh process holds after ``code``, as printed text."""
    code += f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_config_launch_and_report_load_a_config_without_tensorflow_keras_or_horovod():
    code = ("import sys\n"
            "import hvdkeras.config, hvdkeras.launch, hvdkeras.report\n"
            "import hvdkeras.common.workdir, hvdkeras.common.horovod_env\n"
            "cfg = hvdkeras.config.load('configs/digits.yaml', ['trainer.epochs=3'])\n"
            "hvdkeras.config.validate_for_world(cfg, 2)\n"
            "assert cfg.trainer.epochs == 3\n")
    assert _heavy_modules_after(code) == "[]"


# --------------------------------------------------------------------------- the table of docs/architecture.md

ARCHITECTURE = os.path.join(REPO, "docs", "architecture.md")
SECTIONS = ("No TensorFlow, no Horovod", "TensorFlow and Horovod", "Command lines")
HEAVY = ("tensorflow", "keras", "horovod", "tensorflow_datasets", "tf_keras")
# Programs the build's checks run under horovodrun in a process of their own; no module imports them.
PROGRAMS = {"hvdkeras.build_horovod.smoke_check"}


def _doc_rows():
    """[(section, [paths of the row's first cell])] in the order the doc draws them."""
    rows, section = [], None
    for line in open(ARCHITECTURE).read().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif section in SECTIONS and line.startswith("| `hvdkeras"):
            first = line.split("|")[1]
            rows.append((section, [p for p in first.split("`")[1::2] if p.startswith("hvdkeras")]))
    return rows


def _row_of(module, rows):
    """The index of the row naming ``module``'s file, or a folder holding it; None if none does."""
    path = module.replace(".", "/")
    found = []
    for index, (_, paths) in enumerate(rows):
        for p in paths:
            if p.endswith("/") and (path + "/").startswith(p):
                found.append(index)
            elif p in (path + ".py", path + "/__init__.py"):
                found.append(index)
    return found


def test_the_doc_names_every_module_in_exactly_one_row():
    rows = _doc_rows()
    assert [s for s in SECTIONS if any(r[0] == s for r in rows)] == list(SECTIONS)
    for name in _modules():
        if name == "hvdkeras":
            continue  # the package's root: its version, and DistributedOptimizer imported on first use
        found = _row_of(name, rows)
        assert len(found) == 1, f"{name} is in {len(found)} rows of docs/architecture.md (expected 1)"
    named = {p for _, paths in rows for p in paths}
    missing = [p for p in named if not os.path.exists(os.path.join(REPO, p))]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_module_imports_only_its_row_and_the_rows_above():
    rows, graph = _doc_rows(), _graph()
    for name, deps in graph.items():
        if name == "hvdkeras":
            continue
        (mine,) = _row_of(name, rows)
        for dep in deps:
            if dep == "hvdkeras":
                continue
            (theirs,) = _row_of(dep, rows)
            assert theirs <= mine, (f"{name} (row {mine + 1}, {rows[mine][1]}) imports {dep} (row {theirs + 1},"
                                    f" {rows[theirs][1]}), drawn below it in docs/architecture.md")


def _heavy_imports(path):
    tree = ast.parse(open(path).read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return sorted(found & set(HEAVY))


def test_the_light_rows_import_neither_tensorflow_nor_horovod_anywhere():
    rows, modules = _doc_rows(), _modules()
    light = {i for i, (section, _) in enumerate(rows) if section == SECTIONS[0]}
    for name, path in modules.items():
        if name == "hvdkeras" or name in PROGRAMS:
            continue
        (row,) = _row_of(name, rows)
        if row in light:
            assert not _heavy_imports(path), f"{name} imports {_heavy_imports(path)}, drawn as light"


def test_the_dry_run_of_every_shipped_config_on_every_launcher_imports_neither_tensorflow_nor_horovod(tmp_path):
    """``python -m hvdkeras.train --dry_run`` for each config and launcher, in one fresh process."""
    configs = sorted(f for f in os.listdir(os.path.join(REPO, "configs")) if f.endswith(".yaml"))
    code = ("import sys\n"
            "import hvdkeras.train\n"
            "from hvdkeras import config, launch\n"
            f"for name in {configs!r}:\n"
            f"    cfg = config.load('configs/' + name, ['data.data_dir={tmp_path}'])\n"
            "    for launcher in launch.LAUNCHERS:\n"
            "        if cfg.elastic.enabled and launcher != 'horovodrun':\n"
            "            continue\n"
            "        p = launch.plan(cfg, 4, 'a:2,b:2', cores_per_host=4, train_args=['--config', name])\n"
            "        assert launch.describe(p) and launch.render_command(p, launcher)\n")
    assert _heavy_modules_after(code) == "[]"
    assert len(configs) >= 6


def test_what_trains_imports_nothing_of_the_elastic_api():
    # hvdkeras/elastic/ is Horovod's elastic API for scripts (names only); the drivers use the layers below it.
    graph = _graph()
    found = {(m, d) for m, deps in graph.items() if m.startswith("hvdkeras.training") for d in deps
             if d == "hvdkeras.elastic" or d.startswith("hvdkeras.elastic.")}
    assert not found, found


def _top_level_imports(path):
    """The names a file imports when it runs: its module body's imports, outside functions and classes and
    outside ``if TYPE_CHECKING:``, relative ones made absolute."""
    tree = ast.parse(open(path).read(), path)
    name = _module_name(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                found.extend([base] + [f"{base}.{alias.name}" for alias in node.names])
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
    visit(tree.body)
    return found


def test_a_spark_rank_imports_no_pyspark_to_train():
    # A rank unpickles hvdkeras.spark.keras.remote's train: what that import runs must not reach pyspark (its ML
    # library and pandas cost each rank about half a CPU-second on two cores, and Spark's own ranks need neither).
    modules = _modules()
    seen, todo, external = set(), ["hvdkeras.spark.keras.remote", "hvdkeras.spark.rank"], {}
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a module's packages run first
            module = ".".join(parts[:i])
            if module in modules and module not in seen:
                seen.add(module)
                for target in _top_level_imports(modules[module]):
                    if target in modules:
                        todo.append(target)
                    elif not target.startswith("hvdkeras"):
                        external.setdefault(target.split(".")[0], module)
    assert "pyspark" not in external, f"{external['pyspark']} imports pyspark when a rank starts"


# Module names a user's import line dictates, as Horovod's own paths are (`horovod.keras.elastic`,
# `horovod.spark.keras.estimator`), and the old name of `hvdkeras.tf_estimator` kept for old imports.
USER_PATHS = {"hvdkeras.keras.elastic", "hvdkeras.tensorflow.elastic", "hvdkeras.spark.keras.estimator",
              "hvdkeras.estimator"}


def test_no_two_modules_share_a_name_but_those_users_import_by_horovods_paths():
    by_name = {}
    for name in _modules():
        short = name.rsplit(".", 1)[-1]
        if short not in ("hvdkeras", "__main__") and not os.path.basename(_modules()[name]) == "__init__.py":
            by_name.setdefault(short, []).append(name)
    shared = {short: sorted(names) for short, names in by_name.items()
              if len([n for n in names if n not in USER_PATHS]) > 1}
    assert not shared, f"modules of the same name in different places (rename one): {shared}"
