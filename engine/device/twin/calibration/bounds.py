"""What a fit that ends at a parameter's bound means (`BoundHit`): the data asked for a value the
profile's `uncertainty` does not allow, so the model, not only its numbers, likely misses something
the measurements show. Each fitted number has a kind (what it moves: MAXN's governor, the host's
work, power, GPU time) and a direction (whether raising it raises what its kind moves), and the
meaning follows from which bound it ended at."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.core.jsontypes import JsonObject

ParamKind = Literal["governor", "host", "power", "timing", "other"]
Bound = Literal["lower", "upper"]

# path -> (kind, +1 if raising the number raises what its kind moves: MAXN's GPU clock (governor),
# the host's time per step (host), power (power), the GPU's time (timing); 0: no fixed direction)
_EFFECT: dict[str, tuple[ParamKind, int]] = {
    "gpu.podgov_load_seen": ("governor", +1),  # podgov sees more load: it asks for more clock
    "gpu.podgov_target_load": ("governor", -1),  # a higher target load is met at a lower clock
    "gpu.podgov_load_max": ("governor", -1),  # fewer windows jump to a third of the range higher
    "cpu.serial_scale": ("host", +1),
    "cpu.launch_cycles": ("host", +1),
    "cpu.host_overlap": ("host", -1),  # more of the host's work hidden behind the GPU's
    "gpu.matmul_efficiency": ("timing", -1),
    "gpu.vector_efficiency": ("timing", -1),
    "gpu.kernel_cycles": ("timing", +1),
    "gpu.overlap_loss": ("timing", +1),
    "gpu.capacitance_f": ("power", +1),
    "gpu.activity_memory": ("power", +1),
    "gpu.leak_mw": ("power", +1),
    "gpu.vf.knee_hz": ("power", -1),  # the voltage floor holds to a higher clock
    "gpu.vf.max_v": ("power", +1),
    "gpu.vf.exponent": ("power", -1),  # the voltage rises later between knee and top
    "cpu.capacitance_f": ("power", +1),
}
_PREFIX: tuple[tuple[str, ParamKind, int], ...] = (
    ("rails.", "power", +1), ("gpu.podgov", "governor", 0), ("cpu.schedutil", "governor", 0),
)

_MEANING: dict[ParamKind, dict[int, str]] = {
    "governor": {
        +1: "the MAXN points ask for a GPU governor that holds higher clocks than the model can give: the twin's "
            "MAXN is likely too cheap, so its savings against MAXN are likely understated",
        -1: "the MAXN points ask for a GPU governor that holds lower clocks than the model can give: the twin's "
            "MAXN is likely too dear, so its savings against MAXN are likely overstated",
        0: "the MAXN points ask for a governor the model cannot give: the twin's MAXN, and its savings against "
           "it, are the least certain of its figures",
    },
    "host": {
        +1: "the sweeps ask for more host work per step than the model allows: the board's loop likely does more "
            "than the twin's (another --loop, dataloader workers, logging or evaluation inside the steps, another "
            "PyTorch), so small, host-bound models are likely predicted too fast",
        -1: "the sweeps ask for less host work per step than the model allows: the board's loop is likely leaner "
            "than the twin's (--loop lean?), so small, host-bound models are likely predicted too slow",
        0: "the sweeps ask for a host side the model cannot give: host-bound models are the least certain",
    },
    "power": {
        +1: "the measured energy asks for more power than the model allows: check that the sweeps summed the "
            "rails they name (--rails); else this board draws more than the profile's module (another module "
            "or L4T release, or an offset in its power monitor)",
        -1: "the measured energy asks for less power than the model allows: check that the sweeps summed the "
            "rails they name (--rails); else this board draws less than the profile's module (another module "
            "or L4T release, or an offset in its power monitor)",
        0: "the measured energy asks for a power the model cannot give: check the sweeps' rails (--rails)",
    },
    "timing": {
        +1: "the measured times ask for a slower GPU than the model allows: the traced work (FLOPs, bytes, "
            "kernels) is likely less than the board ran, or the times include more than the training steps "
            "(evaluation, data loading, start-up)",
        -1: "the measured times ask for a faster GPU than the model allows: the trace likely overstates the work "
            "(another precision, padding or length than the sweep used?)",
        0: "the measured times ask for GPU timing the model cannot give: the workload's trace is likely off",
    },
    "other": {
        0: "the data ask for a value beyond the bound: the profile's bounds may be too narrow, or the model "
           "misses something these sweeps show",
    },
}


def param_kind(path: str) -> tuple[ParamKind, int]:
    """What the number at `path` moves, and in which direction (0: none fixed)."""
    if path in _EFFECT:
        return _EFFECT[path]
    for prefix, kind, sign in _PREFIX:
        if path.startswith(prefix):
            return kind, sign
    return "other", 0


@dataclass(frozen=True)
class BoundHit:
    """A fitted number that ended at one of its bounds, with the data pushing it beyond."""

    path: str
    bound: Bound
    value: float  # the bound, where the fit ended
    kind: ParamKind
    meaning: str

    def line(self) -> str:
        return f"{self.path} at its {self.bound} bound {self.value:.4g} ({self.kind}): {self.meaning}"

    def to_json(self) -> JsonObject:
        return {"path": self.path, "bound": self.bound, "value": self.value, "kind": self.kind,
                "meaning": self.meaning}


def bound_hit(path: str, bound: Bound, value: float) -> BoundHit:
    kind, sign = param_kind(path)
    asked = sign * (1 if bound == "upper" else -1)  # the data ask for more (+1) or less (-1) of what it moves
    texts = _MEANING[kind]
    return BoundHit(path, bound, value, kind, texts.get(asked, texts[0]))
