"""The layer without TensorFlow or Horovod: rules, files, logs, processes and peers (docs/architecture.md)."""
