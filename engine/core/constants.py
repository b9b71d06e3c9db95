"""The vocabulary every layer and client shares, in one torch-free place (the TUI's forms and
the CLI's flags import it without pulling in torch)."""

from __future__ import annotations

PRECISIONS = ("fp32", "fp16", "bf16")  # what a run asks for; 16-bit needs CUDA on the host
# training modes: every weight; biases and the task head (BitFit); the task head alone on a frozen
# backbone; low-rank adapters (LoRA, through peft) and the task head
MODES = ("full", "bitfit", "head", "lora")
PADDINGS = ("max_length", "dynamic")  # fixed-length batches, or each batch padded to its longest
DEFAULT_PADDING = "dynamic"  # as Hugging Face's examples do (DataCollatorWithPadding)
PAD_FLAGS = {"dynamic": "dynamic", "max": "max_length"}  # --pad CHOICE -> padding
SYNTHETIC_TRAIN_MAX = 2000  # synthetic train size when none is asked for (or the real size, if smaller)
SYNTHETIC_EVAL_MAX = 500  # likewise per evaluation split
DEFAULT_BATCH_SIZE = 32  # for models outside the zoo
DEFAULT_SEQ_LEN = 128
