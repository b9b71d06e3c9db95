"""Where a figure came from: an eval metric means something only for pretrained weights on real
data; the twin computes what a board measures."""

from __future__ import annotations

import pytest

from engine.core.provenance import MetricProvenance, Source, obtained


@pytest.mark.parametrize(("weights", "synthetic", "meaningful", "on_board", "on_twin"), [
    ("pretrained", False, True, "measured", "measured (host)"),
    ("random", True, False, "not meaningful (random weights / generated data)",
     "not meaningful (random weights / generated data)"),
    ("random", False, False, "not meaningful (random weights)", "not meaningful (random weights)"),
    ("pretrained", True, False, "not meaningful (generated data)", "not meaningful (generated data)"),
    ("random", None, False, "not meaningful (random weights)", "not meaningful (random weights)"),
    ("pretrained", None, None, "meaning unknown (data not recorded)", "meaning unknown (data not recorded)"),
    (None, False, None, "meaning unknown (weights not recorded)", "meaning unknown (weights not recorded)"),
    (None, None, None, "meaning unknown (weights not recorded / data not recorded)",
     "meaning unknown (weights not recorded / data not recorded)"),
])
def test_a_metric_is_meaningful_only_for_pretrained_weights_on_real_data(
        weights: str | None, synthetic: bool | None, meaningful: bool | None, on_board: str, on_twin: str) -> None:
    p = MetricProvenance(weights, synthetic)
    assert p.meaningful is meaningful
    assert p.label(Source.MEASURED) == on_board and p.label(Source.TWIN) == on_twin
    assert p.tag(Source.TWIN) == (f"[{on_twin}]" if meaningful else on_twin)  # brackets only for a source
    assert p.label(Source.TWIN, short=True) == (on_twin if meaningful else on_twin.split(" (")[0])
    assert p.to_json()["meaningful"] is meaningful


def test_the_twin_computes_what_a_board_measures() -> None:
    assert [obtained(s) for s in Source] == ["measured", "computed", "predicted"]
