"""The workload: what a run fine-tunes, and fine-tuning it.

At the top, what clients reach: `spec` (WorkloadSpec, the workload as asked for, its key), `resolve`
(the Workload every stage uses), the catalogs it names (`zoo` models, `glue` tasks), `lora`'s settings,
`models` (a spec into a model), `events` (what a run tells its listeners) and `finetune` (one run).
By job below: `data/` (text, tokenizers, lengths, batches), `sizing/` (config checks, memory fit),
`training/` (the loop, optimiser, checkpoints, metrics), `trace/` (step traces, simulated runs).
"""
