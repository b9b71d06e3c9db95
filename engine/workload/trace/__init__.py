"""A training step's cost as a trace, and runs simulated from it (no training).

- `tracer`: one step captured on meta tensors (`step_trace`), costed by `op_costs`;
- `trace_cache`: a workload traced before found again without building its model (torch-free);
- `simulate`: the run's event stream through the step loop, a step costing only its hook.
"""
