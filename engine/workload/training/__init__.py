"""Training a model on a workload: the loop, what trains and how, checkpoints, metrics.

- `loop`: the torch-free step-boundary skeleton every run goes through, trained or simulated;
- `trainer`: the fine-tuning loop itself (`Trainer`, `TrainConfig`);
- `optim`: the parameter mode, gradient checkpointing, AdamW and its schedule, device and precision;
- `checkpoint`: checkpoint files and RNG state, for a resume bit-for-bit;
- `metrics`: GLUE's official metrics in NumPy.
"""
