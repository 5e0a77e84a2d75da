"""The ownership timeline's colours mean one thing each: red an overlap, grey an unowned gap, and no member is
drawn in either (issue 42: a member was drawn red while the legend said red is an overlap)."""

from __future__ import annotations

import colorsys

from matplotlib import colors

from apportion.spark.analytics._report import GAP_COLOUR, MEMBER_PALETTE, OVERLAP_COLOUR, member_colours


def _hsv(colour: str) -> tuple[float, float, float]:
    return colorsys.rgb_to_hsv(*colors.to_rgb(colour))


def test_no_member_colour_looks_like_an_overlap_or_a_gap() -> None:
    red_hue = _hsv(OVERLAP_COLOUR)[0]
    for colour in MEMBER_PALETTE:
        hue, saturation, _ = _hsv(colour)
        distance = min(abs(hue - red_hue), 1 - abs(hue - red_hue)) * 360
        assert saturation >= 0.2, f"{colour} is greyish, like a gap ({GAP_COLOUR})"
        assert distance >= 25 or saturation < 0.2, f"{colour} is {distance:.0f} degrees from the overlap's red"


def test_members_get_distinct_colours_up_to_the_palette_and_cycle_after() -> None:
    names = [f"w{i:02d}" for i in range(20)]
    given = member_colours(names)
    assert len(set(list(given.values())[: len(MEMBER_PALETTE)])) == len(MEMBER_PALETTE)
    assert given["w14"] == given["w00"]
