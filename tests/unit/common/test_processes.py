"""hvdkeras.common.processes: this process ends with its exit handlers run and its output whole; a tree, a group
or a list of processes ends, and what is already gone is no error."""
import subprocess
import sys
import time

import psutil

from hvdkeras.common import processes

# A parent that starts a child and both sleep: a launcher and its rank.
TREE = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        " time.sleep(60)")


def _tree(**kwargs):
    parent = subprocess.Popen([sys.executable, "-c", TREE], **kwargs)
    deadline = time.time() + 20
    while not psutil.Process(parent.pid).children() and time.time() < deadline:
        time.sleep(0.05)
    children = psutil.Process(parent.pid).children()
    assert children
    return parent, children[0].pid


def test_kill_tree_ends_the_launcher_and_its_ranks():
    parent, child = _tree()
    processes.kill_tree(parent.pid)
    parent.wait(timeout=10)
    assert not processes.alive(child)


def test_kill_session_ends_a_session_whose_launcher_is_gone():
    parent, child = _tree(start_new_session=True)
    parent.kill()
    parent.wait(timeout=10)  # the rank is re-parented: a tree walk from the launcher no longer finds it
    processes.kill_session(parent.pid)
    deadline = time.time() + 10
    while processes.alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not processes.alive(child)


def test_stop_terminates_and_gone_processes_are_no_error():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    processes.stop([proc.pid], grace=5)
    assert proc.wait(timeout=5) is not None and not processes.alive(proc.pid)
    processes.kill_tree(proc.pid)
    processes.kill_group(proc.pid)
    processes.stop([proc.pid], grace=0.1)


# Output still in the buffers, an exit handler that writes a file and one that prints, then exit_now(3).
EXIT_NOW = """
import atexit, sys
from hvdkeras.common import processes
atexit.register(lambda: open(sys.argv[1], "w").write("handled"))
atexit.register(lambda: print("handler printed"))
sys.stdout.write("no newline yet")
sys.stderr.write("on stderr")
processes.exit_now(3)
print("never")
"""


def test_exit_now_ends_with_the_status_after_the_exit_handlers_and_the_whole_output(tmp_path):
    marker = tmp_path / "marker"
    proc = subprocess.run([sys.executable, "-c", EXIT_NOW, str(marker)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 3
    assert proc.stdout == "no newline yethandler printed\n" and proc.stderr == "on stderr"
    assert marker.read_text() == "handled"


def test_exit_now_without_exit_handlers_skips_them_and_keeps_the_output(tmp_path):
    marker = tmp_path / "marker"
    script = EXIT_NOW.replace("processes.exit_now(3)", "processes.exit_now(75, exit_handlers=False)")
    proc = subprocess.run([sys.executable, "-c", script, str(marker)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 75
    assert proc.stdout == "no newline yet" and proc.stderr == "on stderr"
    assert not marker.exists()  # a rank whose peers are gone must not wait on them in Horovod's shutdown


def test_scan_finds_a_process_whose_pid_psutil_has_seen_reused():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdin=subprocess.DEVNULL)
    try:
        list(psutil.process_iter(["pid"]))  # psutil keeps a Process for every PID it saw, this one's too
        psutil._pids_reused.add(proc.pid)  # as once psutil finds that PID taken by another process
        assert proc.pid not in [p.pid for p in psutil.process_iter(["pid"])]  # psutil's own scan leaves it out once
        psutil._pids_reused.add(proc.pid)
        assert proc.pid in [p.pid for p in processes.scan(["pid"])]
    finally:
        proc.kill()
        proc.wait()
