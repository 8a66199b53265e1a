"""tests/harness/command_lines.py: a secret on any process's command line is found; one in an environment is not."""
import os
import secrets
import subprocess
import sys
import time

from tests.harness.command_lines import CommandLines


def _held(seen, args, secret=None):
    """Runs ``args``, which wait for a line on stdin, until ``seen`` has scanned every process twice while they
    lived: on a busy machine one scan of ``/proc`` can take longer than a short sleep."""
    env = dict(os.environ, HOROVOD_GLOO_RENDEZVOUS_SECRET=secret) if secret else None
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, env=env)
    first, deadline = seen.scans, time.monotonic() + 60
    while seen.scans < first + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.communicate(b"\n", timeout=60)
    assert proc.returncode == 0 and seen.scans >= first + 2, (proc.returncode, seen.scans, first)


def test_a_secret_written_into_a_shells_command_is_found_and_masked():
    secret = secrets.token_hex(16)
    with CommandLines(interval=0.05) as seen:
        _held(seen, ["sh", "-c", f"env HOROVOD_GLOO_RENDEZVOUS_SECRET={secret} head -n 1 > /dev/null; true"], secret)
    assert secret.encode() in seen.secrets
    (line,) = [e for e in seen.exposed() if "head -n 1" in e]
    assert "HOROVOD_GLOO_RENDEZVOUS_SECRET=<secret> head -n 1" in line and secret not in line


def test_a_secret_only_in_the_environment_is_not_exposed():
    secret = secrets.token_hex(16)
    with CommandLines(interval=0.05) as seen:
        _held(seen, [sys.executable, "-c", "import sys; sys.stdin.readline()"], secret)
    assert secret.encode() in seen.secrets
    assert [e for e in seen.exposed() if secret[:8] in e or "readline" in e] == []


def test_horovods_task_function_given_its_settings_as_an_argument_is_found_even_inside_an_ssh_command():
    task = "python -m horovod.runner.task_fn aW5k bnVt YWRk"
    with CommandLines(interval=0.05) as seen:
        _held(seen, ["sh", "-c", f"head -n 1 > /dev/null; echo '{task} c2V0dGluZ3M=' > /dev/null", "ssh-like"])
        _held(seen, ["sh", "-c", f"head -n 1 > /dev/null; echo '{task} -' > /dev/null", "stdin-like"])
    exposed = [e for e in seen.exposed() if "aW5k" in e]
    assert len(exposed) == 1 and "c2V0dGluZ3M=" in exposed[0], exposed
