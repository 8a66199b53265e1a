"""hvdkeras.ray.worker_checks: the one line a Ray error becomes."""
from hvdkeras.ray.worker_checks import cause_line, first_line, node_of
from tests.unit.ray.test_executor import DIED_IN_INIT


def test_the_cause_is_the_remote_exceptions_own_line_without_rays_colours():
    error = RuntimeError(DIED_IN_INIT)
    assert cause_line(error) == "ModuleNotFoundError: No module named 'hvdkeras'"
    assert node_of(error) == " on node 198.18.213.4"
    assert "\x1b" not in first_line(error) and first_line(error).startswith("The actor died because of an error")


def test_an_error_without_a_traceback_is_its_first_line_and_names_no_node():
    error = RuntimeError("\nThe actor died unexpectedly before finishing this task.\n  (more)")
    assert cause_line(error) == "The actor died unexpectedly before finishing this task."
    assert node_of(error) == ""
    assert cause_line(RuntimeError("")) == "RuntimeError"
