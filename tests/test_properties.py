"""Property tests over the parsers (issue 10): whatever text comes in, each parser gives its
result or its own clear error (a ConfigError / TegrastatsFormatError / argparse's usage
error), never another exception. Examples are few and deadlines off: this file runs in
seconds in the default suite."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.core.errors import ConfigError
from engine.device.tegra_parse import TegrastatsFormatError, parse_line
from engine.dvfs.objectives import parse_objective
from engine.dvfs.policies import parse_static
from engine.core.text import clean_text
from engine.workload.sizing import LIMITS, check_config, check_memory, estimate_memory
from engine.workload.zoo import MODEL_TYPE_FAMILY

FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

_POLICY_WORDS = st.sampled_from(["maxn", "maxn-pinned", "mode", "static", "oracle", "online", "ml", "gpu", "emc",
                                 "cpu", "probes", "warmup", "measure", "selector", "=", ",", ":", "nan", "inf",
                                 "-1", "1e309", "816", "3199", "0", " ", "", "x"])
_POLICY_TEXT = st.one_of(st.text(max_size=40), st.lists(_POLICY_WORDS, max_size=8).map("".join))


@FAST
@given(_POLICY_TEXT)
@example("static:gpu=nan")
@example("static:gpu=1e400,emc=-0")
@example("mode:99999999999999999999")
@example("ml:probes=1e3")
@example("static:")
def test_policy_strings_give_a_policy_or_a_config_error(text: str) -> None:
    from engine.selector import policy_factory

    try:
        policy_factory().make(text)
    except ConfigError:
        pass
    try:
        parse_static(text)
    except ConfigError:
        pass


@FAST
@given(_POLICY_TEXT)
@example("energy@nan%")
@example("eta:inf")
def test_objective_strings_give_an_objective_or_a_config_error(text: str) -> None:
    try:
        parse_objective(text)
    except ConfigError:
        pass


_GOOD_LINE = ("12-01-2025 10:00:00 RAM 2048/62841MB (lfb 8x4MB) CPU [12%@1728,off,5%@1728] EMC_FREQ 3%@3199 "
              "GR3D_FREQ 45%@[1300,1300] cpu@45.5C gpu@44.1C VDD_GPU_SOC 5123mW/5000mW VDD_CPU_CV 812mW/800mW "
              "VIN_SYS_5V0 3200mW/3100mW")
_TEGRA_WORDS = st.sampled_from(_GOOD_LINE.split() + ["RAM", "mW", "W", "C", "@", "%", "[", "]", "/", "nan",
                                                     "99999999999999999999", "-1", "0", "13-45-2025", "25:61:99"])


@FAST
@given(st.one_of(st.text(max_size=120), st.lists(_TEGRA_WORDS, max_size=30).map(" ".join),
                 st.integers(0, len(_GOOD_LINE)).map(lambda n: _GOOD_LINE[:n])))
@example(_GOOD_LINE)
@example("RAM 1/2MB VDD_GPU_SOC 1e309mW/1mW")
@example("02-30-2025 10:00:00 RAM 1/2MB")
def test_tegrastats_lines_parse_or_give_a_format_error(line: str) -> None:
    try:
        sample = parse_line(line)
    except TegrastatsFormatError:
        return
    assert sample.ram_used_mb >= 0 and sample.ram_total_mb >= 0
    for rail in sample.rails.values():
        assert math.isfinite(rail.instant_mw) and rail.instant_mw >= 0


def test_the_good_line_parses() -> None:
    sample = parse_line(_GOOD_LINE)
    assert sample.rails["VDD_GPU_SOC"].instant_mw == 5123.0 and sample.timestamp is not None


_CONFIG_VALUES = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.booleans(), st.none(),
                           st.text(max_size=5), st.lists(st.integers(), max_size=2))


@FAST
@given(st.dictionaries(st.sampled_from(sorted(LIMITS)), _CONFIG_VALUES, max_size=len(LIMITS)),
       st.sampled_from([*sorted(MODEL_TYPE_FAMILY), "other"]),
       st.integers(1, 2**31 - 1), st.integers(1, 2**20), st.sampled_from(["fp32", "fp16", "bf16"]))
def test_configs_are_ok_or_config_errors_and_ok_ones_have_an_estimate(
        config: dict, model_type: str, batch: int, length: int, precision: str) -> None:
    config = {"model_type": model_type, **config}
    try:
        check_config(config, "cfg")
    except ConfigError:
        return
    if model_type not in MODEL_TYPE_FAMILY:  # resolve_model refuses it first; the estimate does too
        with pytest.raises(ConfigError, match="not one slm-dvfs can size"):
            estimate_memory(config, batch, length, precision)
        return
    estimate = estimate_memory(config, batch, length, precision)
    assert estimate.total > 0 and estimate.activations == estimate.activations_per_sample * batch
    try:
        check_memory(estimate, "cfg", batch, length)
    except ConfigError as exc:
        assert "needs an estimated" in exc.what and exc.remedy


def _numeric_types() -> list[tuple[str, object]]:
    from engine.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted({(f"{name} {a.dest}", a.type) for name, p in sub.choices.items() for a in p._actions
                   if a.type is not None and a.type not in (str, Path) and not getattr(a.type, "is_name", False)},
                  key=lambda t: t[0])


NUMERIC = _numeric_types()


@pytest.mark.parametrize("name, parse", NUMERIC, ids=[n for n, _ in NUMERIC])
@settings(max_examples=40, deadline=None, database=None)
@given(text=st.one_of(st.text(max_size=12), st.integers(-2**80, 2**80).map(str),
                      st.floats(allow_nan=True, allow_infinity=True).map(repr)))
def test_every_cli_number_is_in_range_or_a_usage_error(name: str, parse, text: str) -> None:
    try:
        value = parse(text)
    except argparse.ArgumentTypeError as exc:
        assert str(exc)
        return
    assert isinstance(value, (int, float)) and math.isfinite(value) and abs(value) < 2**63


@FAST
@given(st.text(max_size=60))
def test_clean_text_leaves_no_controls_and_keeps_printable_text(text: str) -> None:
    out = clean_text(text)
    assert all(c in "\n\t" or (ord(c) >= 0x20 and not 0x7f <= ord(c) <= 0x9f) for c in out)
    # No assume(): most random texts hold a control, and filtering them out trips
    # hypothesis' filter_too_much health check now and then.
    if all(c in "\n\t" or c.isprintable() for c in text):
        assert out == text


@FAST
@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=60))
def test_clean_text_keeps_printable_text(text: str) -> None:
    if all(c.isprintable() for c in text):
        assert clean_text(text) == text


# --- issue 20: one strict reader for every number, JSON and name a user hands the engine ---------------
from engine.core.userinput import MAX_NAME_CHARS, check_name, load_json, parse_float, parse_int  # noqa: E402

_NUMBERISH = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="0123456789_.,+-eE ٣", max_size=20),
    st.integers(-10**6, 10**6).map(lambda n: f"{n:_}"),  # `1_000`: Python reads it, we must not
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@FAST
@given(_NUMBERISH)
@example("2_5")
@example("1" * 5000)
@example("٣")
def test_strict_numbers_are_plain_ascii_finite_or_a_config_error(text: str) -> None:
    try:
        value = parse_float(text, "x")
    except ConfigError as exc:
        assert exc.remedy and len(exc.what) < 200
    else:
        assert math.isfinite(value) and value == float(text.strip())
        assert text.strip().isascii() and "_" not in text and len(text.strip()) <= 64
    try:
        whole = parse_int(text, "x")
    except ConfigError as exc:
        assert exc.remedy and len(exc.what) < 200
    else:
        assert whole == int(text.strip()) and "_" not in text and text.strip().isascii()


@pytest.mark.parametrize("name, parse", NUMERIC, ids=[n for n, _ in NUMERIC])
@settings(max_examples=15, deadline=None, database=None)
@given(text=st.integers(1000, 10**6).map(lambda n: f"{n:_}"))
def test_no_cli_number_reads_a_separator(name: str, parse, text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse(text)


_JSONISH = st.one_of(
    st.text(max_size=60),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
                 lambda inner: st.one_of(st.lists(inner, max_size=3),
                                         st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                 max_leaves=20).map(json.dumps),
    st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 100_000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.integers(300, 6000).map(lambda n: "[" + "7" * n + "]"),
)


@FAST
@given(_JSONISH)
def test_user_json_is_data_or_a_config_error(text: str) -> None:
    try:
        load_json(text, "the file", "give JSON")
    except ConfigError as exc:
        assert exc.remedy.endswith("give JSON") and len(exc.what) < 300


@FAST
@given(st.text(max_size=80) | st.integers(1, 6000).map(lambda n: "m" * n))
def test_names_are_one_bounded_printable_line_or_a_config_error(text: str) -> None:
    try:
        name = check_name(text, "model")
    except ConfigError as exc:
        assert len(exc.what) < 200 and "\n" not in exc.what
    else:
        assert name.isprintable() and len(name) <= MAX_NAME_CHARS and name == text.strip()


@pytest.mark.parametrize("line", ["RAM " + "1" * 5000 + "/2MB VDD_GPU_SOC 1mW/1mW",
                                  "12-01-2025 10:00:00 RAM 1/2MB CPU [" + "9" * 5000 + "%@729]",
                                  "RAM 1/2MB VDD_GPU_SOC 99999999999999999999mW/1mW", "RAM ٣/٣MB"])
def test_tegrastats_lines_with_huge_or_foreign_numbers_are_format_errors(line: str) -> None:
    with pytest.raises(TegrastatsFormatError):
        parse_line(line)
