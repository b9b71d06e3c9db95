# Made by make.sh beside it (with the code of main at 4f4911d).
"""A sweep cancelled after 4 points, by today's code (resumable)."""
from engine.results.store import Store
from engine.run.sweep import SweepSpec, SweepPointDone, run_sweep
from engine.workload.training.loop import TrainControl
from engine.workload.lora import LoraSettings

control = TrainControl()
def stop(ev):
    if isinstance(ev, SweepPointDone) and ev.index >= 4:
        control.cancel("golden store: left unfinished")
spec = SweepSpec(model="bert-small", task="mrpc", fast=True, twin="agx-orin-64gb", padding="max_length",
                 mode="lora", lora=LoraSettings(rank=16, alpha=32.0), batch_size=8, space="gpu+emc")
with Store() as store:
    r = run_sweep(spec, store=store, callbacks=[stop], control=control)
    print(r.sweep_id, r.status, r.measured)
