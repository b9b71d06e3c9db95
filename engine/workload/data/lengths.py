"""How long a task's examples are, and what that makes of dynamically padded batches; torch-free.

With dynamic padding (Hugging Face's DataCollatorWithPadding: each batch padded to its longest
example) a step's shape is the batch's longest example, so its cost follows the task's length
distribution, not only the maximum length. Two sources, in order:

- the run's own data, tokenized (`measured`): a GLUE folder, the hub cache, or the synthetic
  generator's text, as the run's tokenizer joins a pair;
- the shipped table (profiles/glue_lengths.toml, `published`): per task, the mean token length
  of each text from published file sizes, as a log-normal with an assumed spread; for the paths
  that load no data (`run --simulate`, `sweep --fast`, `select`).

A batch of b examples drawn independently is padded to its longest: P(max <= l) = F(l)^b.
`bucket_weights` bins that into the lengths the step traces are taken at (multiples of
`TRACE_LENGTH_BUCKET`, capped at the maximum length), which is how the real run rounds a batch's
length too (engine/workload/finetune.py).
"""

from __future__ import annotations

import bisect
import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

from engine.core import paths
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, as_float, as_int, as_list, as_object

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# Batch lengths round up to this for step traces: a run needs a handful of traces, not one per length.
TRACE_LENGTH_BUCKET = 16
# A bucket less likely than this folds into the next longer one (fewer traces; never shorter steps).
MIN_BUCKET_WEIGHT = 0.005


def bucket_of(length: int, max_len: int, bucket: int = TRACE_LENGTH_BUCKET) -> int:
    """The trace length a batch padded to `length` is costed at."""
    return min(int(max_len), bucket * max(1, math.ceil(int(length) / bucket)))


@dataclass(frozen=True)
class LengthDistribution:
    """Token lengths of one task's examples (special tokens included), before truncation.

    Either log-normal (`mu`, `sigma` of the text tokens, plus `specials`) or empirical
    (`samples`, sorted). `origin` says where it comes from, for reports."""

    task: str
    origin: str  # "published: ..." | "measured: ..."
    mu: float = 0.0
    sigma: float = 0.0
    specials: int = 0
    samples: tuple[int, ...] = ()

    @property
    def measured(self) -> bool:
        return bool(self.samples)

    def cdf(self, length: float) -> float:
        """P(an example has at most `length` tokens)."""
        if self.samples:
            return bisect.bisect_right(self.samples, length) / len(self.samples)
        text = length - self.specials
        if text <= 0:
            return 0.0
        return 0.5 * (1.0 + math.erf((math.log(text) - self.mu) / (self.sigma * math.sqrt(2.0))))

    @property
    def mean(self) -> float:
        if self.samples:
            return sum(self.samples) / len(self.samples)
        return self.specials + math.exp(self.mu + self.sigma ** 2 / 2.0)

    def quantile(self, q: float) -> float:
        if self.samples:
            return float(self.samples[min(len(self.samples) - 1, max(0, math.ceil(q * len(self.samples)) - 1))])
        from statistics import NormalDist

        return self.specials + math.exp(self.mu + self.sigma * NormalDist().inv_cdf(min(max(q, 1e-9), 1 - 1e-9)))

    def summary(self, max_len: int | None = None, batch_size: int | None = None) -> JsonObject:
        out: JsonObject = {"task": self.task, "origin": self.origin, "mean": round(self.mean, 2),
                               "p50": round(self.quantile(0.5), 1), "p90": round(self.quantile(0.9), 1)}
        if self.samples:
            out.update(examples=len(self.samples), max=self.samples[-1])
        if max_len and batch_size:
            out["expected_batch_max"] = round(expected_batch_max(self, batch_size, max_len), 2)
        return out


def lognormal(task: str, texts: Sequence[float], cv: float, specials: int, origin: str) -> LengthDistribution:
    """A log-normal over the texts' total tokens with their summed mean and the std of
    independent texts each of coefficient of variation `cv`."""
    mean = float(sum(texts))
    if mean <= 0 or cv <= 0:
        raise ConfigError(f"length table of {task}: mean {mean} and cv {cv} must be positive",
                          "restore profiles/glue_lengths.toml from the repository")
    std = cv * math.sqrt(sum(t * t for t in texts))
    sigma2 = math.log(1.0 + (std / mean) ** 2)
    return LengthDistribution(task, origin, mu=math.log(mean) - sigma2 / 2.0, sigma=math.sqrt(sigma2),
                              specials=int(specials))


def measured(task: str, lengths: Sequence[int], origin: str) -> LengthDistribution:
    """The empirical distribution of tokenized lengths (special tokens included)."""
    if not lengths:
        raise ConfigError(f"no examples of {task} to measure lengths from", "give more --train-samples")
    return LengthDistribution(task, origin, samples=tuple(sorted(int(n) for n in lengths)))


def table_path() -> Path:
    return paths.profiles_dir() / "glue_lengths.toml"


@lru_cache(maxsize=1)
def _table() -> Mapping[str, object]:
    path = table_path()
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"the length table {path} is missing",
                          "reinstall slm-dvfs, or restore profiles/glue_lengths.toml from the repository") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the length table {path} is not valid TOML ({exc})",
                          "restore profiles/glue_lengths.toml from the repository") from None


def published(task: str) -> LengthDistribution:
    """The shipped (published-statistics) distribution of a GLUE task's lengths."""
    from engine.workload.glue import get_task

    glue = get_task(task)
    table = _table()
    row = table.get(glue.name)
    if not isinstance(row, Mapping) or not row.get("texts"):
        raise ConfigError(f"the length table has no row for {glue.name}",
                          "restore profiles/glue_lengths.toml from the repository")
    defaults = as_object(table.get("defaults", {}))
    pair = bool(row.get("pair", glue.is_pair))
    specials = as_int(defaults.get("specials_pair" if pair else "specials_single", 3 if pair else 2))
    return lognormal(glue.name, [as_float(t) for t in as_list(row["texts"])],
                     as_float(row.get("cv", defaults.get("cv", 0.5))),
                     specials, f"published: {row.get('source', 'profiles/glue_lengths.toml')}")


def bucket_weights(dist: LengthDistribution, batch_size: int, max_len: int,
                   bucket: int = TRACE_LENGTH_BUCKET, min_weight: float = MIN_BUCKET_WEIGHT
                   ) -> tuple[tuple[int, float], ...]:
    """(trace length, probability) of a batch of `batch_size` examples padded to its longest,
    truncated at `max_len`: P(batch max <= l) = F(l)^b, binned at multiples of `bucket` (the last
    bin ends at max_len). Bins under `min_weight` fold into the next longer one; weights sum to 1."""
    if batch_size < 1 or max_len < 1:
        raise ConfigError(f"batch {batch_size} and length {max_len} must be positive", "give both 1 or more")
    edges = sorted({bucket_of(l, max_len, bucket) for l in range(1, max_len + 1, 1)})
    out: list[tuple[int, float]] = []
    carry, below = 0.0, 0.0
    for edge in edges:
        at_most = 1.0 if edge >= max_len else dist.cdf(edge) ** batch_size
        w = at_most - below + carry
        below = at_most
        if w < min_weight and edge < max_len:
            carry = w
            continue
        carry = 0.0
        if w > 0.0:
            out.append((edge, w))
    total = sum(w for _l, w in out)
    return tuple((l, w / total) for l, w in out)


def expected_batch_max(dist: LengthDistribution, batch_size: int, max_len: int) -> float:
    """E[min(max of batch_size lengths, max_len)], unbucketed: sum over l of P(max >= l)."""
    return float(sum(1.0 - dist.cdf(l - 1) ** batch_size for l in range(1, max_len + 1)))
