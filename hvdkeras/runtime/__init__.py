"""The TensorFlow and Horovod runtime: the import, version differences, the process, checkpoints, the run's position."""
