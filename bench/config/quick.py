"""The tiny configuration: Hydra overrides small enough to run a job end to end in seconds on 2 cores."""

TINY_OVERRIDES = [
    "workload.train_samples=16384",
    "workload.eval_samples=8192",
    "workload.calibration_samples=2048",
    "model.train.samples=16384",
    "model.train.progress=false",
    "eval_batch_size=4096",
    "calibration_batch_size=1024",
    "batch_size=512",
    "timing.warmup_batches=1",
    "timing.trials=2",
    "timing.max_rounds=2",
    "timing.batches_per_trial=2",
    "timing.min_trial_seconds=0",
]
