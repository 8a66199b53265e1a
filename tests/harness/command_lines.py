"""Every process's command line, sampled while a job runs: no secret may be on one.

``ps`` shows any process's arguments to every local user, so the rendezvous secret
(``HOROVOD_GLOO_RENDEZVOUS_SECRET``, Horovod build patches 0010 and 0011) and the job's key (inside the
settings Horovod's task function gets) must reach the ranks another way. :class:`CommandLines` reads
``/proc/<pid>/cmdline`` of every process on the machine (the lab's hosts and Slurm nodes are network
namespaces of this machine, so their processes are here too) and learns the secrets the job really
used from the processes' environments, then says which command lines carried one::

    with CommandLines() as seen:
        horovodrun(...)
    assert seen.secrets and seen.exposed() == []
"""
import os
import threading

SECRET_VAR = b"HOROVOD_GLOO_RENDEZVOUS_SECRET"
TASK_FN = b"horovod.runner.task_fn"


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone, or not ours to read
        return b""


class CommandLines:
    """Samples every process's arguments and the rendezvous secrets in their environments, every
    ``interval`` seconds from ``__enter__`` to ``__exit__`` (a process that lives shorter may be missed:
    the shells and ssh clients that would carry a secret live as long as their rank)."""

    def __init__(self, interval=0.2):
        self.interval = interval
        self.cmdlines = set()  # (pid, the argv joined by NUL)
        self.secrets = set()  # the values of SECRET_VAR seen in any process's environment
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="command-lines", daemon=True)

    def __enter__(self):
        self._scan()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._scan()
        return False

    def _run(self):
        while not self._stop.wait(self.interval):
            self._scan()

    def _scan(self):
        me = str(os.getpid())
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            cmdline = _read(f"/proc/{pid}/cmdline")
            if cmdline:
                self.cmdlines.add((int(pid), cmdline))
            for entry in _read(f"/proc/{pid}/environ").split(b"\0"):
                if entry.startswith(SECRET_VAR + b"="):
                    value = entry[len(SECRET_VAR) + 1:]
                    if value:
                        self.secrets.add(value)
        self.scans += 1

    def exposed(self):
        """The command lines that carried a secret, each as ``pid: argv`` (the secret masked, at most 300
        characters): one holding a secret some process used, or passing Horovod's task function its settings
        (which hold the job's key) as an argument. Every process on the machine counts, whoever started it."""
        found = []
        for pid, cmdline in sorted(self.cmdlines):
            args = cmdline.rstrip(b"\0").split(b"\0")
            words = [w for a in args for w in a.replace(b"'", b" ").split()]  # a shell's or ssh's command too
            task_fn_settings = any(w == TASK_FN and len(words) > i + 4 and words[i + 4] != b"-"
                                   for i, w in enumerate(words))
            if task_fn_settings or any(s in cmdline for s in self.secrets):
                text = b" ".join(args)
                for s in self.secrets:
                    text = text.replace(s, b"<secret>")
                found.append(f"{pid}: {text.decode(errors='replace')[:300]}")
        return found
