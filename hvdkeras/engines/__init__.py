"""The launch core every engine shares: where the ranks go, how they meet, how often they start, how they fail.

An engine (Spark's barrier stage, :mod:`hvdkeras.spark.gang`; a Ray actor group next) only says how to start N
processes together, how to learn their hosts and how to hear that one was lost. The rest is here, with no engine
imported: :mod:`~hvdkeras.engines.placement` (each task's rank from its host, as ``horovodrun`` places them),
:mod:`~hvdkeras.engines.rendezvous_server` (the gang's authenticated Gloo rendezvous and each rank's Horovod
settings), :mod:`~hvdkeras.engines.attempts` (the retry policy, the count of starts and why each failed) and
:mod:`~hvdkeras.engines.failures` (the typed exceptions a failure travels as, across the engine's process
boundary too).
"""
