"""Clock-table helpers shared by the backend, the tree generator and the sweeps."""

from __future__ import annotations

import pytest

from engine.core.units import format_mhz
from engine.core.clocks import highest_at_most
from engine.core.errors import DeviceError

GPU = (306_000_000, 612_000_000, 816_000_000, 1_300_500_000)


@pytest.mark.parametrize("cap, expected", [
    (None, 1_300_500_000), (816_000_000, 816_000_000), (900_000_000, 816_000_000), (10**12, 1_300_500_000),
    (100_000_000, 306_000_000),  # below the floor: the lowest step stays
])
def test_highest_at_most(cap, expected):
    assert highest_at_most(GPU, cap) == expected
    assert highest_at_most(tuple(reversed(GPU)), cap) == expected  # order of the table does not matter


def test_highest_at_most_of_nothing_is_an_error():
    with pytest.raises(DeviceError):
        highest_at_most((), 1)


@pytest.mark.parametrize("hz, text", [(816_000_000, "816"), (1_300_500_000, "1300.5"), (2_201_600_000, "2201.6"),
                                      (665_600_000, "665.6"), (0, "0")])
def test_format_mhz(hz, text):
    assert format_mhz(hz) == text
