# SIGUSR1 (--signal above, or `scancel --batch --signal=USR1 <jobid>`): the time limit is near. SIGTERM
# goes to ${runner}, which forwards it to every rank; they stop at one batch with a checkpoint (status
# 75), and the job requeues itself: the next run resumes at that batch. SIGTERM (`scancel <jobid>`)
# is passed on the same way, without the requeue. The traps come first: a signal before ${runner}
# has started is kept (bash's default for SIGUSR1 would end the job unrequeued) and acted on below.
REQUEUE=
SIGNALLED=
HVD=
SENT=
stop() { SIGNALLED=1; if [ -n "$${HVD}" ] && [ -z "$${SENT}" ]; then SENT=1; kill -TERM "$${HVD}" 2>/dev/null || true; fi; }
trap 'REQUEUE=1; stop' USR1
trap stop TERM
