"""Training: the data, models, optimizers and tasks, their one assembly, the trainer and its drivers."""
