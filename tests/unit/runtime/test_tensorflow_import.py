"""hvdkeras.runtime.tensorflow_import: the command lines' one explicit TensorFlow import, quiet at the level asked
for."""
import os
import subprocess
import sys

from tests.unit.helpers import REPO


def _run(code, level="2"):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=REPO,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL=level))


def test_importing_the_module_imports_nothing_heavy():
    out = _run("import sys, hvdkeras.runtime.tensorflow_import\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'horovod')))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_load_keeps_stderr_to_what_the_level_allows_and_gives_stderr_back():
    out = _run("import sys\n"
               "from hvdkeras.runtime import tensorflow_import\n"
               "tf = tensorflow_import.load()\n"
               "assert tensorflow_import.load() is tf  # once\n"
               "print('after', file=sys.stderr)\n"
               "import hvdkeras.runtime.compat\n"
               "print(tf.__version__)")
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == ["after"]  # no absl banner, no I0000/W0000 lines; fd 2 restored
