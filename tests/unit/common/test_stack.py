"""hvdkeras.common.stack: the TensorFlow, Keras and Horovod versions a process runs, and config.yaml's line."""
import os
import re

from hvdkeras.common import stack
from hvdkeras.common.stack import Stack
from tests.unit.helpers import REPO


def _pinned(name):
    """The TensorFlow, Keras and Horovod versions stacks/<name>/constraints.txt pins."""
    text = open(os.path.join(REPO, "stacks", name, "constraints.txt")).read()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, flags=re.M))
    return Stack(pins["tensorflow-cpu"], pins["keras"], pins["horovod"])


def test_this_interpreter_runs_one_of_the_pinned_stacks():
    assert stack.current() in {_pinned(name) for name in os.listdir(os.path.join(REPO, "stacks"))}


def test_config_yamls_line_reads_back_and_its_absence_is_none():
    keras3 = _pinned("keras3")
    text = f"trainer:\n  epochs: 15\n# Resolved for this job (2 ranks), not config keys:\n#   {keras3.line()}\n"
    assert Stack.from_config_text(text) == keras3
    assert keras3.describe() == f"TensorFlow {keras3.tensorflow}, Keras {keras3.keras}, Horovod {keras3.horovod}"
    assert Stack.from_config_text("trainer:\n  epochs: 15\n") is None
    assert Stack.from_config_text(f"note: '{keras3.line()}'\n") is None  # a comment line only


def test_checkpoints_carry_over_within_one_keras_major_only():
    keras2, keras3 = _pinned("keras2"), _pinned("keras3")
    assert (keras2.keras_major, keras3.keras_major) == ("2", "3")
    assert not stack.checkpoints_carry_over(keras2, keras3) and not stack.checkpoints_carry_over(keras3, keras2)
    assert stack.checkpoints_carry_over(keras3, Stack("2.16.2", "3.4.1", keras3.horovod))
