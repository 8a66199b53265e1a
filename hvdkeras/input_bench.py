"""``python -m hvdkeras.input_bench``: input pipeline versus training step, in :mod:`hvdkeras.bench.input_pipeline`."""
from hvdkeras.bench import input_pipeline

if __name__ == "__main__":
    input_pipeline.run()
