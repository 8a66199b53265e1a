"""One rank of :func:`hvdkeras.spark.run`, started by its Spark task: ``python -m hvdkeras.spark.rank``.

``python -m hvdkeras.spark.rank [--go-on-stdin] PAYLOAD RESULT``: ``PAYLOAD`` is a file holding the cloudpickled
``(fn, args, kwargs)``; the rank runs ``fn(*args, **kwargs)`` and writes its cloudpickled return value to
``RESULT`` (through a temporary name, renamed once whole). Its environment carries Horovod's settings for this rank
(``HOROVOD_RANK`` and the rest), set by the task. With ``--go-on-stdin`` the task starts it before the gang agrees
on the start: it loads the payload (importing what ``fn`` needs), then reads one line from its standard input, a
JSON object of the settings still to come (the rendezvous' port), and runs ``fn``; an empty input means that the
gang does not start, and it exits 0.

Like every hvdkeras rank, it stops as on a SIGTERM when its task, the other end of its output, goes away
(:mod:`hvdkeras.common.launcher_watch`): Spark kills the whole barrier stage's tasks when one fails. A function
that fails prints its traceback, which the driver shows with the rank's other lines, and the rank exits 1.
Once its result is written, the rank ends without the interpreter's teardown
(:func:`hvdkeras.common.processes.exit_now`): the gang's tasks wait for their ranks to exit.
"""
from __future__ import annotations

import json
import os
import sys
from typing import List, Optional

USAGE = ("usage: python -m hvdkeras.spark.rank [--go-on-stdin] PAYLOAD RESULT (started by hvdkeras.spark.run's"
         " Spark tasks)")


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the payload's function and writes its result; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    go_on_stdin = args[:1] == ["--go-on-stdin"]
    args = args[1:] if go_on_stdin else args
    if len(args) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    payload_path, result_path = args
    from hvdkeras.common import signals

    signals.install_process_flag()  # a SIGTERM, or the task gone, ends the rank as a preemption
    import cloudpickle

    with open(payload_path, "rb") as f:
        fn, fn_args, fn_kwargs = cloudpickle.load(f)
    if go_on_stdin:
        go = sys.stdin.readline()
        if not go.strip():
            return 0
        os.environ.update({str(k): str(v) for k, v in json.loads(go).items()})
    result = fn(*fn_args, **fn_kwargs)
    partial = result_path + ".partial"
    with open(partial, "wb") as f:
        cloudpickle.dump(result, f)
    os.replace(partial, result_path)
    return 0


if __name__ == "__main__":
    from hvdkeras.common import processes

    processes.exit_now(main())
