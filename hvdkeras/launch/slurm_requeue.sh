# SIGUSR1 (--signal above, or `scancel --batch --signal=USR1 <jobid>`): the time limit is near. SIGTERM
# goes to ${runner}, which forwards it to every rank; they stop at one batch with a checkpoint (status
# 75), and the job requeues itself: the next run resumes at that batch. SIGTERM (`scancel <jobid>`)
# is passed on the same way, without the requeue.
REQUEUE=
SIGNALLED=
stop() { SIGNALLED=1; if [ -n "$${HVD:-}" ]; then kill -TERM "$${HVD}" 2>/dev/null || true; fi; }
trap 'REQUEUE=1; stop' USR1
trap stop TERM
${command} &
HVD=$$!
STATUS=0; wait "$${HVD}" || STATUS=$$?
if [ -n "$${SIGNALLED}" ]; then STATUS=0; wait "$${HVD}" || STATUS=$$?; fi  # ${runner}'s own exit
if [ -n "$${REQUEUE}" ]; then scontrol requeue "$${SLURM_JOB_ID}"; fi
exit "$${STATUS}"
