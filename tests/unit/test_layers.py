"""The package's layers: dependencies point one way, and the light layers stay light."""
import ast
import os
import subprocess
import sys

import pytest

import hvdkeras

PACKAGE_DIR = os.path.dirname(os.path.abspath(hvdkeras.__file__))
REPO = os.path.dirname(PACKAGE_DIR)


def _module_name(path):
    rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _modules():
    found = {}
    for root, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                found[_module_name(path)] = path
    return found


def _imports(name, path, modules):
    """The package's own modules that ``name`` imports anywhere in its file, function level included."""
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


def _graph():
    modules = _modules()
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


def test_the_package_has_no_import_cycle():
    graph = _graph()
    assert len(graph) > 30 and "hvdkeras.trainer" in graph  # the parser sees the whole package
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("layer, allowed", [
    ("hvdkeras.errors", set()),
    ("hvdkeras.config", {"hvdkeras.errors"}),
    ("hvdkeras.registry", {"hvdkeras.errors"}),
])
def test_bottom_layers_import_only_what_is_below_them(layer, allowed):
    graph = _graph()
    for name, deps in graph.items():
        if name == layer or name.startswith(layer + "."):
            outside = {d for d in deps if not d.startswith(layer + ".") and d != layer} - allowed
            assert not outside, f"{name} imports {sorted(outside)}"


def test_config_launch_and_report_load_a_config_without_tensorflow_keras_or_horovod():
    code = ("import sys\n"
            "import hvdkeras.config, hvdkeras.launch, hvdkeras.report, hvdkeras.workdir, hvdkeras.horovod_env\n"
            "cfg = hvdkeras.config.load('configs/digits.yaml', ['trainer.epochs=3'])\n"
            "hvdkeras.config.validate_for_world(cfg, 2)\n"
            "assert cfg.trainer.epochs == 3\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'horovod')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
