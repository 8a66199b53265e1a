"""hvdkeras.spark.rank: a rank runs the payload's function and writes its result, whole or not at all; started
early, it runs it only on the go its task sends, with the settings that come with it."""
import io
import os

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


def _port():
    return os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]


def test_a_rank_started_early_runs_on_the_go_with_the_settings_it_brings(tmp_path, monkeypatch):
    payload, result = tmp_path / "payload", tmp_path / "result"
    payload.write_bytes(cloudpickle.dumps((_port, (), {})))
    monkeypatch.setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "0")
    monkeypatch.setattr("sys.stdin", io.StringIO('{"HOROVOD_GLOO_RENDEZVOUS_PORT": "4242"}\n'))
    try:
        assert rank.main(["--go-on-stdin", str(payload), str(result)]) == 0
    finally:
        signals.uninstall_process_flag()
    assert cloudpickle.loads(result.read_bytes()) == "4242"


def test_a_rank_started_early_whose_gang_does_not_start_runs_nothing(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    payload, result = tmp_path / "payload", tmp_path / "result"
    payload.write_bytes(cloudpickle.dumps((marker.write_text, ("ran",), {})))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # the task closed the pipe without a go
    try:
        assert rank.main(["--go-on-stdin", str(payload), str(result)]) == 0
    finally:
        signals.uninstall_process_flag()
    assert not marker.exists() and not result.exists()


def test_wrong_arguments_are_one_usage_line(capsys):
    assert rank.main(["only-one"]) == 2
    assert capsys.readouterr().err.strip() == rank.USAGE
