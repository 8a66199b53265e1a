STATUS=0
if [ -z "$${SIGNALLED}" ]; then  # not signalled while the job started
  ${command} &
  HVD=$$!
  if [ -n "$${SIGNALLED}" ]; then stop; fi  # signalled before HVD was set
  wait "$${HVD}" || STATUS=$$?
  if [ -n "$${SIGNALLED}" ]; then STATUS=0; wait "$${HVD}" || STATUS=$$?; fi  # ${runner}'s own exit
fi
if [ -n "$${REQUEUE}" ]; then scontrol requeue "$${SLURM_JOB_ID}"; fi
exit "$${STATUS}"
