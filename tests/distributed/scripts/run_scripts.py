"""Run under horovodrun: several scripts (examples, check scripts), one after the other, in these two processes.

    python run_scripts.py JOBS_JSON

``JOBS_JSON``: a list of ``[script, arg, ...]``. Each script runs as ``python script arg ...`` would
run it (``runpy`` as ``__main__``, its ``sys.argv``, its folder first on ``sys.path``), between two
lines every rank prints, ``SCRIPT <i> BEGIN <name>`` and ``SCRIPT <i> END <name>``, so the test reads
each script's own output (``tests/harness/shared_job.py``). One TensorFlow import and one Horovod start
serve every script; Keras' session is cleared between them, so each builds its models from nothing, as
in a process of its own. A script that raises ends the job with its traceback (the later ones do not run).
"""
import atexit
import gc
import json
import os
import runpy
import sys

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

# Each on a line of its own, whatever a progress bar left unfinished before it
BEGIN, END = "\nSCRIPT {} BEGIN {}", "\nSCRIPT {} END {}"


def main():
    from hvdkeras.runtime import tensorflow_import

    tensorflow_import.load()  # as the command lines import TensorFlow: quiet, matplotlib at its first use
    jobs = json.loads(sys.argv[1])
    for index, (script, *args) in enumerate(jobs):
        name = os.path.basename(script)
        print(BEGIN.format(index, name), flush=True)
        sys.argv = [script, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            sys.path.pop(0)
        sys.stdout.flush()
        print(END.format(index, name), flush=True)
        import tensorflow as tf

        tf.keras.backend.clear_session()


if __name__ == "__main__":
    main()
