"""A stand-in for ``horovodrun ... python -m hvdkeras.train`` in the soak's loop tests: two sleeping "ranks"
(``HOROVOD_RANK`` set), an epoch every 0.05 s with a metrics line and a checkpoint folder, the trainer's
resume, preemption and final lines; it fails when a rank dies and exits 75 on SIGTERM.

    python soak_fake_job.py WORKDIR EPOCHS PYTHON_SLEEP

PYTHON_SLEEP is sleep(1) under a name starting with ``python`` (a symbolic link), as the soak looks for ranks.
"""
import json
import os
import signal
import subprocess
import sys
import time

ranks, done, ckpts = [], 0, ""


def stop(signum, frame):
    print(f"[0]<stderr>:hvdkeras: preempted at the end of epoch {done}; checkpoint written:"
          f" {os.path.join(ckpts, 'epoch-%04d' % done)}", flush=True)
    for rank in ranks:
        rank.kill()
    sys.exit(75)


signal.signal(signal.SIGTERM, stop)
workdir, epochs, python_sleep = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ckpts = os.path.join(workdir, "checkpoints")
os.makedirs(ckpts, exist_ok=True)
done = max([int(n.split("-")[1]) for n in os.listdir(ckpts) if n.startswith("epoch-")] or [0])
where = f"resuming after epoch {done} from {ckpts}" if done else "starting fresh"
print(f"[0]<stdout>:[hvdkeras] rank 0/2: {where}; epoch {done + 1} of {epochs}", flush=True)
print("[0]<stdout>:[hvdkeras] steps per epoch 4: (auto)", flush=True)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # no rank started and not yet in the list
ranks += [subprocess.Popen([python_sleep, "60"], env=dict(os.environ, HOROVOD_RANK=str(r)))
          for r in range(2)]
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


while done < epochs:
    time.sleep(0.05)
    if any(rank.poll() is not None for rank in ranks):
        for rank in ranks:
            rank.kill()
        sys.exit(1)
    done += 1
    folder = os.path.join(ckpts, "epoch-%04d" % done)
    os.makedirs(folder)
    with open(os.path.join(folder, "ckpt.data-00000-of-00001"), "w") as f:
        f.write("x" * 1000)
    with open(os.path.join(folder, "meta.json"), "w") as f:
        f.write("{}")
    with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"epoch": done, "step_time_s": 0.01}) + "\n")
for rank in ranks:
    rank.kill()
print("[0]<stdout>:[hvdkeras] final validation (2 ranks, every example once): val_accuracy=0.5000", flush=True)
