"""A sequence-classification model's parameters, module by module, from its config.json alone.

`architecture(config)` lists what `AutoModelForSequenceClassification` builds for each family
(engine.workload.zoo.FAMILIES), as transformers names and shapes it: every linear layer with
its in/out widths (LoRA adapts them by name), the embeddings, norms and other tensors, and
which of them form the task head. Counts are exact for the zoo (tests/test_models.py checks
every entry against `params` counted on meta tensors, and tiny configs of each family against
transformers itself); no torch is imported, so the TUI's first screen can size a workload.

Shapes the count follows: gated MLPs (three matrices: Llama, Qwen, Gemma; Phi-3 fuses gate and
up), grouped-query attention (num_key_value_heads x head_dim for K and V), DeBERTa-v2's
relative position embeddings (and its optional convolution and position projections),
ELECTRA's factorised embeddings, OPT's projected embeddings, GPT-2's Conv1D names. Tied
embeddings add nothing: classification drops the language-model head, so the vocabulary
counts once (the input embedding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from engine.core.errors import ConfigError
from engine.core.jsontypes import as_float, as_int, as_list
from engine.workload.zoo import MODEL_TYPE_FAMILY, dims

# transformers' defaults (5.x) for the keys that shape each model, used where a config.json
# leaves a key out (the zoo ships only the keys that shape the model).
_DEFAULTS: dict[str, dict[str, object]] = {
    "bert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2),
    "roberta": dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2),
    "electra": dict(vocab_size=30522, hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
                    intermediate_size=1024, max_position_embeddings=512, type_vocab_size=2, embedding_size=128),
    "distilbert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=6, num_attention_heads=12,
                       intermediate_size=3072, max_position_embeddings=512, dropout=0.1, attention_dropout=0.1),
    "deberta-v2": dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=24, num_attention_heads=24,
                       intermediate_size=6144, max_position_embeddings=512, type_vocab_size=0,
                       position_biased_input=True, relative_attention=False, max_relative_positions=-1,
                       position_buckets=-1, share_att_key=False, norm_rel_ebd="none", conv_kernel_size=0,
                       conv_groups=1),
    "gpt_neox": dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                     intermediate_size=24576, attention_bias=True, hidden_dropout=0.0, attention_dropout=0.0),
    "gpt2": dict(vocab_size=50257, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 n_positions=1024, resid_pdrop=0.1, attn_pdrop=0.1, activation_function="gelu_new"),
    "opt": dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, max_position_embeddings=2048, enable_bias=True,
                do_layer_norm_before=True, _remove_final_layer_norm=False, dropout=0.1, attention_dropout=0.0),
    "llama": dict(vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                  intermediate_size=11008, attention_bias=False, mlp_bias=False),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=32, intermediate_size=22016),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=32, head_dim=128, intermediate_size=22016, attention_bias=False),
    "gemma": dict(vocab_size=256000, hidden_size=3072, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=16, head_dim=256, intermediate_size=24576, attention_bias=False),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, num_hidden_layers=26, num_attention_heads=8,
                   num_key_value_heads=4, head_dim=256, intermediate_size=9216, attention_bias=False),
    "phi3": dict(vocab_size=32064, hidden_size=3072, num_hidden_layers=32, num_attention_heads=32,
                 intermediate_size=8192),
}
# transformers runs these with its eager attention (no SDPA support in the model class), which
# keeps the heads x length x length softmax for backward; every other family runs through SDPA.
EAGER_ATTENTION = frozenset({"deberta-v2", "gemma2"})


@dataclass(frozen=True)
class Linear:
    """One linear layer (per layer when copies = layers), named as transformers names it."""

    name: str  # the module's own name, e.g. "q_proj" (LoRA's target_modules match it)
    n_in: int
    n_out: int
    bias: bool
    copies: int = 1
    head: bool = False  # part of the task head (optim.HEAD_NAMES: trained in every mode)

    @property
    def params(self) -> int:
        return self.copies * (self.n_in * self.n_out + (self.n_out if self.bias else 0))

    @property
    def biases(self) -> int:
        return self.copies * self.n_out if self.bias else 0


@dataclass(frozen=True)
class Tensors:
    """Other parameters (embeddings, norms, convolutions): weight and bias elements per copy."""

    name: str
    weight: int
    bias: int = 0
    copies: int = 1

    @property
    def params(self) -> int:
        return self.copies * (self.weight + self.bias)


@dataclass(frozen=True)
class Architecture:
    """What a config builds, for counting parameters and sizing activations."""

    model_type: str
    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    gated: bool  # gated MLP: gate, up and down matrices
    activation: str  # the MLP's activation as the config names it
    hidden_dropout: bool  # dropout on the residual branches (its masks are kept for backward)
    attention_dropout: bool
    norms_per_layer: int
    embedding_norm: bool  # a LayerNorm on the embeddings (the encoders)
    linears: tuple[Linear, ...]
    others: tuple[Tensors, ...]

    @property
    def eager_attention(self) -> bool:
        return self.model_type in EAGER_ATTENTION

    @property
    def params(self) -> int:
        return sum(x.params for x in self.linears) + sum(x.params for x in self.others)

    @property
    def head_params(self) -> int:
        return sum(x.params for x in self.linears if x.head)

    @property
    def bias_params(self) -> int:
        """Bias elements outside the head (BitFit trains them, and the head)."""
        return sum(x.biases for x in self.linears if not x.head) + sum(x.bias * x.copies for x in self.others)

    @property
    def linear_weights(self) -> int:
        """Weight elements of the linear layers (what 16-bit autocast casts and keeps for backward)."""
        return sum(x.copies * x.n_in * x.n_out for x in self.linears)

    def lora_targets(self, targets: tuple[str, ...]) -> tuple[Linear, ...]:
        """The backbone linears LoRA adapts: those named in `targets` (peft matches the module's
        name). A target that names no linear layer of this model is a ConfigError."""
        found = tuple(x for x in self.linears if not x.head and x.name in targets)
        missing = [t for t in targets if not any(x.name == t for x in found)]
        if missing:
            names = sorted({x.name for x in self.linears if not x.head})
            raise ConfigError(f"LoRA target(s) {', '.join(missing)} name no linear layer of this "
                              f"{self.model_type} model", f"name some of {', '.join(names)} with --lora-targets")
        return found

    def lora_params(self, targets: tuple[str, ...], rank: int) -> int:
        """Parameters of the A (rank x in) and B (out x rank) matrices on every target."""
        return sum(x.copies * rank * (x.n_in + x.n_out) for x in self.lora_targets(targets))


def architecture(config: Mapping[str, object], num_labels: int = 2) -> Architecture:
    """The modules `AutoModelForSequenceClassification` builds from `config` (a config.json's
    contents) for a `num_labels`-way task; ConfigError for a model type no family covers."""
    model_type = str(config.get("model_type"))
    family = MODEL_TYPE_FAMILY.get(model_type)
    if family is None:
        raise ConfigError(f"model type {model_type!r} is not one slm-dvfs can size",
                          f"use one of {', '.join(sorted(MODEL_TYPE_FAMILY))}")
    cfg = {**_DEFAULTS.get(model_type, {}), **{k: v for k, v in config.items() if v is not None}, **dims(config)}
    h, n, a = as_int(cfg["hidden_size"]), as_int(cfg["num_hidden_layers"]), as_int(cfg["num_attention_heads"])
    build = _ENCODERS.get(model_type) or _DECODERS[model_type]
    return build(model_type, family, cfg, h, n, a, int(num_labels))


def _arch(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int, *, kv: int, d: int,
          inter: int, gated: bool, act: str, hidden_dropout: float, attention_dropout: float, norms: int,
          embedding_norm: bool, linears: list[Linear], others: list[Tensors]) -> Architecture:
    return Architecture(
        model_type=model_type, family=family, hidden=h, layers=n, heads=a, kv_heads=kv, head_dim=d,
        intermediate=inter, vocab=as_int(cfg["vocab_size"]), gated=gated, activation=act,
        hidden_dropout=hidden_dropout > 0, attention_dropout=attention_dropout > 0, norms_per_layer=norms,
        embedding_norm=embedding_norm, linears=tuple(linears), others=tuple(others))


# ----------------------------------------------------------------------------- encoders


def _bert_like(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int,
               labels: int) -> Architecture:
    """BERT, RoBERTa, ELECTRA: post-LN encoder layers with a GELU MLP."""
    inter, vocab = as_int(cfg["intermediate_size"]), as_int(cfg["vocab_size"])
    emb = as_int(cfg.get("embedding_size", h)) if model_type == "electra" else h
    others = [Tensors("word_embeddings", vocab * emb),
              Tensors("position_embeddings", as_int(cfg["max_position_embeddings"]) * emb),
              Tensors("token_type_embeddings", as_int(cfg["type_vocab_size"]) * emb),
              Tensors("LayerNorm", emb, emb),
              Tensors("LayerNorm", h, h, copies=2 * n)]
    linears = [Linear(name, h, h, True, n) for name in ("query", "key", "value", "dense")]
    linears += [Linear("dense", h, inter, True, n), Linear("dense", inter, h, True, n)]
    if emb != h:
        linears.append(Linear("embeddings_project", emb, h, True))
    if model_type == "bert":  # the pooler (not in the head: BitFit trains only its bias)
        linears += [Linear("dense", h, h, True), Linear("classifier", h, labels, True, head=True)]
    else:  # RobertaClassificationHead / ElectraClassificationHead
        linears += [Linear("dense", h, h, True, head=True), Linear("out_proj", h, labels, True, head=True)]
    return _bert_style(model_type, family, cfg, h, n, a, inter, linears, others)


def _bert_style(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int, inter: int,
                linears: list[Linear], others: list[Tensors]) -> Architecture:
    """A post-norm encoder layer as BERT names its config (RoBERTa, ELECTRA and DeBERTa do too)."""
    return _arch(model_type, family, cfg, h, n, a, kv=a, d=h // a, inter=inter, gated=False,
                 act=str(cfg.get("hidden_act", "gelu")), hidden_dropout=as_float(cfg.get("hidden_dropout_prob", 0.1)),
                 attention_dropout=as_float(cfg.get("attention_probs_dropout_prob", 0.1)), norms=2,
                 embedding_norm=True, linears=linears, others=others)


def _distilbert(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int,
                labels: int) -> Architecture:
    inter = as_int(cfg.get("intermediate_size", 4 * h))
    others = [Tensors("word_embeddings", as_int(cfg["vocab_size"]) * h),
              Tensors("position_embeddings", as_int(cfg["max_position_embeddings"]) * h),
              Tensors("LayerNorm", h, h, copies=1 + 2 * n)]
    linears = [Linear(name, h, h, True, n) for name in ("q_lin", "k_lin", "v_lin", "out_lin")]
    linears += [Linear("lin1", h, inter, True, n), Linear("lin2", inter, h, True, n),
                Linear("pre_classifier", h, h, True, head=True), Linear("classifier", h, labels, True, head=True)]
    return _arch(model_type, family, cfg, h, n, a, kv=a, d=h // a, inter=inter, gated=False,
                 act=str(cfg.get("activation", "gelu")), hidden_dropout=as_float(cfg.get("dropout", 0.1)),
                 attention_dropout=as_float(cfg.get("attention_dropout", 0.1)), norms=2, embedding_norm=True,
                 linears=linears, others=others)


def _deberta(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int,
             labels: int) -> Architecture:
    """DeBERTa-v2/v3: BERT-like layers, relative position embeddings shared by every layer."""
    inter, emb = as_int(cfg["intermediate_size"]), as_int(cfg.get("embedding_size", h))
    max_pos = as_int(cfg["max_position_embeddings"])
    others = [Tensors("word_embeddings", as_int(cfg["vocab_size"]) * emb), Tensors("LayerNorm", h, h),
              Tensors("LayerNorm", h, h, copies=2 * n)]
    if cfg["position_biased_input"]:
        others.append(Tensors("position_embeddings", max_pos * emb))
    if as_int(cfg["type_vocab_size"]) > 0:
        others.append(Tensors("token_type_embeddings", as_int(cfg["type_vocab_size"]) * emb))
    linears = [Linear(name, h, h, True, n) for name in ("query_proj", "key_proj", "value_proj", "dense")]
    linears += [Linear("dense", h, inter, True, n), Linear("dense", inter, h, True, n)]
    if emb != h:
        linears.append(Linear("embed_proj", emb, h, False))
    if cfg.get("relative_attention"):
        span = as_int(cfg["max_relative_positions"])
        span = max_pos if span < 1 else span
        if as_int(cfg["position_buckets"]) > 0:
            span = as_int(cfg["position_buckets"])
        others.append(Tensors("rel_embeddings", 2 * span * h))
        if "layer_norm" in [x.strip() for x in str(cfg["norm_rel_ebd"]).lower().split("|")]:
            others.append(Tensors("LayerNorm", h, h))
        pos_att = cfg.get("pos_att_type") or ()
        pos_att = [x.strip() for x in pos_att.lower().split("|")] if isinstance(pos_att, str) else list(as_list(pos_att))
        if not cfg["share_att_key"]:
            if "c2p" in pos_att:
                linears.append(Linear("pos_key_proj", h, h, True, n))
            if "p2c" in pos_att:
                linears.append(Linear("pos_query_proj", h, h, True, n))
    kernel = as_int(cfg["conv_kernel_size"])
    if kernel > 0:  # ConvLayer after the first layer: a grouped Conv1d and its LayerNorm
        others += [Tensors("conv", h * (h // as_int(cfg["conv_groups"])) * kernel, h), Tensors("LayerNorm", h, h)]
    pooled = as_int(cfg.get("pooler_hidden_size", h))
    linears += [Linear("dense", pooled, pooled, True), Linear("classifier", pooled, labels, True, head=True)]
    return _bert_style(model_type, family, cfg, h, n, a, inter, linears, others)


# ----------------------------------------------------------------------------- decoders


def _pythia(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int,
            labels: int) -> Architecture:
    inter, bias = as_int(cfg["intermediate_size"]), bool(cfg["attention_bias"])
    others = [Tensors("embed_in", as_int(cfg["vocab_size"]) * h), Tensors("layernorm", h, h, copies=2 * n + 1)]
    linears = [Linear("query_key_value", h, 3 * h, bias, n), Linear("dense", h, h, bias, n),
               Linear("dense_h_to_4h", h, inter, True, n), Linear("dense_4h_to_h", inter, h, True, n),
               Linear("score", h, labels, False, head=True)]
    return _arch(model_type, family, cfg, h, n, a, kv=a, d=h // a, inter=inter, gated=False,
                 act=str(cfg.get("hidden_act", "gelu")), hidden_dropout=as_float(cfg["hidden_dropout"]),
                 attention_dropout=as_float(cfg["attention_dropout"]), norms=2, embedding_norm=False,
                 linears=linears, others=others)


def _gpt2(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int,
          labels: int) -> Architecture:
    inter = as_int(cfg.get("intermediate_size") or 4 * h)
    others = [Tensors("wte", as_int(cfg["vocab_size"]) * h),
              Tensors("wpe", as_int(cfg.get("n_positions", cfg.get("max_position_embeddings", 1024))) * h),
              Tensors("ln", h, h, copies=2 * n + 1)]
    linears = [Linear("c_attn", h, 3 * h, True, n), Linear("c_proj", h, h, True, n),
               Linear("c_fc", h, inter, True, n), Linear("c_proj", inter, h, True, n),
               Linear("score", h, labels, False, head=True)]
    return _arch(model_type, family, cfg, h, n, a, kv=a, d=h // a, inter=inter, gated=False,
                 act=str(cfg["activation_function"]), hidden_dropout=as_float(cfg["resid_pdrop"]),
                 attention_dropout=as_float(cfg["attn_pdrop"]), norms=2, embedding_norm=False,
                 linears=linears, others=others)


def _opt(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int,
         labels: int) -> Architecture:
    inter, bias = as_int(cfg["intermediate_size"]), bool(cfg["enable_bias"])
    proj = as_int(cfg.get("word_embed_proj_dim") or h)
    # OPT offsets learned positions by 2 (its padding convention).
    others = [Tensors("embed_tokens", as_int(cfg["vocab_size"]) * proj),
              Tensors("embed_positions", (as_int(cfg["max_position_embeddings"]) + 2) * h),
              Tensors("layer_norm", h, h if bias else 0, copies=2 * n)]
    if cfg["do_layer_norm_before"] and not cfg["_remove_final_layer_norm"]:
        others.append(Tensors("final_layer_norm", h, h if bias else 0))
    linears = [Linear(name, h, h, bias, n) for name in ("q_proj", "k_proj", "v_proj", "out_proj")]
    linears += [Linear("fc1", h, inter, bias, n), Linear("fc2", inter, h, bias, n),
                Linear("score", proj, labels, False, head=True)]
    if proj != h:
        linears += [Linear("project_in", proj, h, False), Linear("project_out", h, proj, False)]
    return _arch(model_type, family, cfg, h, n, a, kv=a, d=h // a, inter=inter, gated=False,
                 act=str(cfg.get("activation_function", "relu")), hidden_dropout=as_float(cfg["dropout"]),
                 attention_dropout=as_float(cfg["attention_dropout"]), norms=2, embedding_norm=False,
                 linears=linears, others=others)


def _gated(model_type: str, family: str, cfg: Mapping[str, object], h: int, n: int, a: int,
           labels: int) -> Architecture:
    """Llama, Qwen2/3, Gemma/Gemma-2, Phi-3: RMSNorm, rotary, grouped-query attention, gated MLP."""
    inter = as_int(cfg["intermediate_size"])
    kv = as_int(cfg.get("num_key_value_heads", a))
    d = as_int(cfg.get("head_dim") or h // a)
    q, k = a * d, kv * d
    attn_bias = model_type == "qwen2" or bool(cfg.get("attention_bias", False))
    mlp_bias = bool(cfg.get("mlp_bias", False))
    if model_type == "phi3":  # fused projections, no biases
        linears = [Linear("qkv_proj", h, q + 2 * k, False, n), Linear("o_proj", q, h, False, n),
                   Linear("gate_up_proj", h, 2 * inter, False, n), Linear("down_proj", inter, h, False, n)]
    else:
        o_bias = attn_bias and model_type != "qwen2"  # Qwen2 biases q, k, v but not o
        linears = [Linear("q_proj", h, q, attn_bias, n), Linear("k_proj", h, k, attn_bias, n),
                   Linear("v_proj", h, k, attn_bias, n), Linear("o_proj", q, h, o_bias, n),
                   Linear("gate_proj", h, inter, mlp_bias, n), Linear("up_proj", h, inter, mlp_bias, n),
                   Linear("down_proj", inter, h, mlp_bias, n)]
    linears.append(Linear("score", h, labels, False, head=True))
    norms = 4 if model_type == "gemma2" else 2  # Gemma-2 norms before and after each block
    others = [Tensors("embed_tokens", as_int(cfg["vocab_size"]) * h), Tensors("norm", h, copies=norms * n + 1)]
    if model_type == "qwen3":  # RMSNorm on each head's query and key
        others.append(Tensors("qk_norm", 2 * d, copies=n))
    act = str(cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu")
    return _arch(model_type, family, cfg, h, n, a, kv=kv, d=d, inter=inter, gated=True, act=act,
                 hidden_dropout=as_float(cfg.get("resid_pdrop", 0.0)), attention_dropout=as_float(cfg.get("attention_dropout", 0.0)),
                 norms=norms, embedding_norm=False, linears=linears, others=others)


_ENCODERS = {"bert": _bert_like, "roberta": _bert_like, "electra": _bert_like, "distilbert": _distilbert,
             "deberta-v2": _deberta}
_DECODERS = {"gpt_neox": _pythia, "gpt2": _gpt2, "opt": _opt, "llama": _gated, "qwen2": _gated,
             "qwen3": _gated, "gemma": _gated, "gemma2": _gated, "phi3": _gated}
