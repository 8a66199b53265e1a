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


def test_load_leaves_matplotlib_for_later_and_keras_plots_with_it_at_first_use(tmp_path):
    """Keras 3 imports matplotlib.pyplot at its own import; load() keeps it out (a rank never plots), and Keras'
    plotting functions import it when first called."""
    png = tmp_path / "gallery.png"
    out = _run("import sys\n"
               "from hvdkeras.runtime import tensorflow_import\n"
               "tensorflow_import.load()\n"
               "from hvdkeras.runtime import compat\n"
               "print('matplotlib' in sys.modules, 'matplotlib' in str(sys.meta_path), compat.KERAS_3)\n"
               "if compat.KERAS_3:\n"
               "    import numpy as np\n"
               "    compat.keras.visualization.plot_image_gallery(np.zeros((2, 4, 4, 3)), rows=1, cols=2,\n"
               f"                                                  path={str(png)!r})\n"
               "    import matplotlib.pyplot\n"
               "    print('plotted', matplotlib.pyplot.get_backend())\n")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] in ("False False True", "False False False")  # not imported, and the refusal is gone
    if lines[0].endswith("True"):  # Keras 3 has keras.visualization
        assert lines[1].startswith("plotted") and png.stat().st_size > 0
