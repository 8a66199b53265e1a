"""hvdkeras.common.launcher_watch: a rank whose launcher's end of its output closes stops as on a SIGTERM."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading

from hvdkeras.common import launcher_watch
from hvdkeras.common.launcher_watch import LauncherWatch


def test_a_pipe_whose_reader_closed_is_reported_and_an_open_one_or_a_file_is_not():
    read, write = os.pipe()
    other_read, other_write = os.pipe()
    left, right = socket.socketpair()
    try:
        assert launcher_watch.watchable(write) and launcher_watch.watchable(left.fileno())
        with tempfile.TemporaryFile() as f:
            assert not launcher_watch.watchable(f.fileno())  # a file has no other end
        assert launcher_watch.closed([write, other_write, left.fileno()]) == []
        os.close(read)
        right.close()
        assert launcher_watch.closed([write, other_write, left.fileno()], timeout_s=1) == [write, left.fileno()]
    finally:
        for fd in (write, other_read, other_write):
            os.close(fd)
        left.close()


def test_the_watch_calls_on_gone_once_when_the_reader_goes_and_stop_ends_it_quietly():
    read, write = os.pipe()
    called = threading.Event()
    seen = []
    watch = LauncherWatch([write], on_gone=lambda fds: (seen.append(list(fds)), called.set()), interval_s=0.05)
    assert watch.start()
    os.close(read)
    assert called.wait(5) and seen == [[write]] and watch.gone == [write]
    watch.stop()
    quiet_read, quiet_write = os.pipe()
    quiet = LauncherWatch([quiet_write], on_gone=lambda fds: seen.append("never"), interval_s=0.05)
    assert quiet.start()
    quiet.stop()
    os.close(quiet_read)  # after stop(): nothing is called
    assert seen == [[write]]
    os.close(write)
    os.close(quiet_write)
    with tempfile.TemporaryFile() as f:
        assert not LauncherWatch([f.fileno()]).start()  # nothing to watch: no thread


def test_an_output_pointed_at_a_file_meanwhile_is_still_handed_to_on_gone():
    # TensorFlow's import points stderr at a capture file for a while (hvdkeras.runtime.tensorflow_import): the
    # watch polls stdout alone then, but when stdout's reader goes, stderr is diverted too, so that the lines
    # said then reach the rank's log rather than a capture that a SIGTERM may keep from being read back.
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    called = threading.Event()
    seen = []
    watch = LauncherWatch([out_write, err_write], on_gone=lambda fds: (seen.append(list(fds)), called.set()),
                          interval_s=0.05)
    assert watch.start()
    saved = os.dup(err_write)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), err_write)  # the capture
        os.close(out_read)
        assert called.wait(5)
    assert seen == [[out_write, err_write]] and watch.gone == [out_write]
    for fd in (out_write, err_write, err_read, saved):
        os.close(fd)


def test_a_process_whose_output_reader_goes_away_is_sent_sigterm_with_its_output_diverted_to_a_file(tmp_path):
    # What horovodrun does to a rank on another host when it is stopped: it ends the rank's ssh client, which
    # closes the session's pipes and sends the rank nothing. The watch turns that into the rank's SIGTERM.
    after = tmp_path / "logs" / "after-launcher.log"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import signal, sys, time
        from hvdkeras.common.launcher_watch import LauncherWatch

        def on_term(signum, frame):
            print(f"signal {{signum}} after the reader left", flush=True)
            sys.exit(75)

        signal.signal(signal.SIGTERM, on_term)
        LauncherWatch(interval_s=0.05, divert_to={str(after)!r}).start()
        print("ready", flush=True)
        time.sleep(30)
        """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.getcwd())
    assert child.stdout.readline().strip() == b"ready"
    child.stdout.close()
    child.stderr.close()
    assert child.wait(timeout=10) == 75
    said = after.read_text().splitlines()
    assert any("the launcher's end of this rank's output closed" in line and "stopping as on a SIGTERM" in line
               for line in said), said
    assert said[-1] == f"signal {int(signal.SIGTERM)} after the reader left", said


def test_output_diverted_to_a_file_that_cannot_be_made_goes_to_dev_null(tmp_path):
    read, write = os.pipe()
    blocker = tmp_path / "file"
    blocker.write_text("")
    try:
        assert launcher_watch.divert([write], str(blocker / "sub" / "x.log")) == os.devnull
        os.write(write, b"nowhere")  # no error: /dev/null
        assert launcher_watch.divert([write], str(tmp_path / "ok" / "x.log")) == str(tmp_path / "ok" / "x.log")
        os.write(write, b"kept")
        assert (tmp_path / "ok" / "x.log").read_bytes() == b"kept"
    finally:
        os.close(read)
        os.close(write)
