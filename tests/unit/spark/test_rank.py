"""hvdkeras.spark.rank: a rank runs the payload's function and writes its result, whole or not at all."""
import cloudpickle

from hvdkeras.common import signals
from hvdkeras.spark import rank


def _add(a, b=0):
    return a + b


def test_the_payloads_function_runs_and_its_result_is_written(tmp_path):
    payload, result = tmp_path / "payload", tmp_path / "result"
    payload.write_bytes(cloudpickle.dumps((_add, (2,), {"b": 3})))
    try:
        assert rank.main([str(payload), str(result)]) == 0
    finally:
        signals.uninstall_process_flag()
    assert cloudpickle.loads(result.read_bytes()) == 5
    assert not (tmp_path / "result.partial").exists()


def test_wrong_arguments_are_one_usage_line(capsys):
    assert rank.main(["only-one"]) == 2
    assert capsys.readouterr().err.strip() == rank.USAGE
