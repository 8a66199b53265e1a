"""Patch 0011: horovodrun hands the rendezvous secret and its task function's settings over on no command line.

The installed Horovod's own functions, with ``safe_shell_exec.execute`` recorded instead of run where a rank or a
task server would start: a local rank inherits the secret in its environment, a remote rank's shell reads it from
ssh's standard input, and the task function's settings (the job's secret key) go the same way. The real
``execute`` writes ``stdin_data`` to the command and ends its input. The jobs themselves are sampled by
``tests/harness/command_lines.py`` (SECURITY.md lists those tests).
"""
import io
import os

import pytest

pytest.importorskip("horovod.runner.gloo_run")
from horovod.runner import gloo_run  # noqa: E402
from horovod.runner.common.util import codec, safe_shell_exec, secret  # noqa: E402
from horovod.runner.common.util.hosts import SlotInfo  # noqa: E402
from horovod.runner.driver import driver_service  # noqa: E402
from horovod.runner.http.http_server import SECRET_ENV, rendezvous_secret  # noqa: E402


def _settings():
    """horovodrun's settings for a job of two ranks, with a secret key of its own."""
    from horovod.runner.common.util import timeout
    from horovod.runner.common.util.settings import Settings as HorovodSettings

    return HorovodSettings(num_proc=2, key=secret.make_secret_key(),
                           start_timeout=timeout.Timeout(60, message="the task did not start in {timeout} s"))


@pytest.fixture
def executed(monkeypatch):
    """What ``safe_shell_exec.execute`` was asked to run: a list of ``(command, kwargs)``."""
    calls = []
    monkeypatch.setattr(safe_shell_exec, "execute", lambda command, **kw: calls.append((command, kw)) or 0)
    return calls


def _rank_command(settings, host):
    env = {"PATH": os.environ["PATH"], "USER_VAR": "1", SECRET_ENV: "from-the-launchers-environment"}
    run_command = gloo_run.get_run_command(["python", "train.py"], "10.0.0.1", ["eth0"], 1234,
                                           secret=rendezvous_secret(settings.key))
    return gloo_run._slot_info_to_command_fn(run_command, env)(SlotInfo(host, 0, 0, 0, 2, 1, 1))


def test_a_local_rank_inherits_the_secret_in_its_environment_not_its_command(executed):
    settings = _settings()
    expected = rendezvous_secret(settings.key)
    command = _rank_command(settings, "localhost")
    gloo_run._exec_command_fn(settings)(command, SlotInfo("localhost", 0, 0, 0, 2, 1, 1), [])
    ((run, kw),) = executed
    assert SECRET_ENV not in run and expected not in run and "USER_VAR=1" in run  # the rest of the env as before
    assert kw["env"][SECRET_ENV] == expected and kw["stdin_data"] is None


def test_a_remote_ranks_shell_reads_the_secret_from_sshs_input(executed, monkeypatch):
    from horovod.runner.util import network

    monkeypatch.setattr(network, "resolve_host_address", lambda host: "192.0.2.7")  # not one of this host's
    settings = _settings()
    expected = rendezvous_secret(settings.key)
    gloo_run._exec_command_fn(settings)(_rank_command(settings, "far"), SlotInfo("far", 0, 0, 0, 2, 1, 1), [])
    ((run, kw),) = executed
    assert run.startswith("ssh ") and expected not in run
    assert f"IFS= read -r {SECRET_ENV} ; export {SECRET_ENV} ; cd " in run
    assert kw["stdin_data"] == expected + "\n" and kw["env"] is None


def test_the_task_functions_settings_go_on_its_input(executed, monkeypatch):
    from horovod.runner.util import threads

    monkeypatch.setattr(threads, "execute_function_multithreaded",
                        lambda fn, args_list, block_until_all_done=True: [fn(*args) for args in args_list])
    settings = _settings()
    settings.nics = None
    driver_service._launch_task_servers(["localhost", "far"], {"localhost"}, {"lo": [("127.0.0.1", 1)]}, settings)
    assert len(executed) == 2
    for command, kw in executed:
        assert command.rstrip("'").endswith(" -")  # the settings' place, ssh's command or the local one
        assert codec.loads_base64(kw["stdin_data"].strip()).key == settings.key
        assert codec.dumps_base64(settings) not in command


def test_execute_writes_the_input_it_is_given_then_ends_it():
    out = io.StringIO()
    status = safe_shell_exec.execute("IFS= read -r x; echo \"got $x\"; cat; echo end", stdout=out,
                                     stdin_data="a secret\n")
    assert status == 0 and out.getvalue() == "got a secret\nend\n"


def test_the_task_function_started_as_horovodrun_starts_it_finds_the_interfaces_with_its_settings_from_its_input():
    # Horovod's interface discovery for real, on one local host: the task function's registration is signed with
    # the job's key, so it ends only if the task read its settings from its input
    settings = _settings()
    assert driver_service._driver_fn(["localhost"], {"localhost"}, settings, fn_cache=None) >= {"lo"}
