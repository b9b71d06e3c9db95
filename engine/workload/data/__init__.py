"""A workload's data: GLUE text from its three sources, tokenized, batched; torch-free until encoded.

- `text`: one task's text from the hub, a local GLUE folder or generated offline (`GlueText`), and
  its encoding (`encode` -> `EncodedSplit`);
- `glue_folder`: the original GLUE folder layout, read and written; `synthetic`: generated examples;
- `tokenization`: the checkpoint's tokenizer, or one trained on the task's text;
- `lengths`: how long a task's examples are, and the dynamically padded batches that makes;
- `batching`: training batches in a seeded order a resumed run repeats.
"""
