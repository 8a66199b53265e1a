"""tests/harness/command_lines.py: a secret on any process's command line is found; one in an environment is not."""
import os
import secrets
import subprocess
import sys

from tests.harness.command_lines import CommandLines


def _run(args, secret):
    subprocess.run(args, env=dict(os.environ, HOROVOD_GLOO_RENDEZVOUS_SECRET=secret), check=True)


def test_a_secret_written_into_a_shells_command_is_found_and_masked():
    secret = secrets.token_hex(16)
    with CommandLines(interval=0.05) as seen:
        _run(["sh", "-c", f"env HOROVOD_GLOO_RENDEZVOUS_SECRET={secret} sleep 0.5; true"], secret)
    assert secret.encode() in seen.secrets
    (line,) = [e for e in seen.exposed() if "sleep 0.5" in e]
    assert "HOROVOD_GLOO_RENDEZVOUS_SECRET=<secret> sleep 0.5" in line and secret not in line


def test_a_secret_only_in_the_environment_is_not_exposed():
    secret = secrets.token_hex(16)
    with CommandLines(interval=0.05) as seen:
        _run([sys.executable, "-c", "import time; time.sleep(0.5)"], secret)
    assert secret.encode() in seen.secrets
    assert [e for e in seen.exposed() if secret[:8] in e or "time.sleep(0.5)" in e] == []


def test_horovods_task_function_given_its_settings_as_an_argument_is_found_even_inside_an_ssh_command():
    task = "python -m horovod.runner.task_fn aW5k bnVt YWRk"
    with CommandLines(interval=0.05) as seen:
        subprocess.run(["sh", "-c", f"sleep 0.5; echo '{task} c2V0dGluZ3M=' > /dev/null", "ssh-like"], check=True)
        subprocess.run(["sh", "-c", f"sleep 0.5; echo '{task} -' > /dev/null", "stdin-like"], check=True)
    exposed = [e for e in seen.exposed() if "aW5k" in e]
    assert len(exposed) == 1 and "c2V0dGluZ3M=" in exposed[0], exposed
