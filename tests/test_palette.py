"""Run colors people can tell apart and text people can read, measured: CIEDE2000 between palette
colors (with simulated color blindness) and WCAG contrast of every text/background pair of both
themes, computed from the values the app uses."""

from __future__ import annotations

import itertools

import pytest
from support.colors import ciede2000, contrast, distance, lab, luminance, simulate

from pilothouse.gui.models import SEVERITY
from pilothouse.gui.palette import PALETTE, RunColors, color, dashed
from pilothouse.gui.themes import AA_TEXT, STATUSES, TEXT_PAIRS, THEMES, Theme, status_role

# least CIEDE2000 between any two palette colors; ~2 is just noticeable, >10 is "another color"
MIN_DISTANCE = {None: 20.0, "deuteranopia": 12.0, "protanopia": 12.0, "tritanopia": 10.0}


def test_ciede2000_matches_sharmas_reference_pairs():
    """Pairs 1, 2 and 33 of Sharma, Wu & Dalal (2005), table 1."""
    assert ciede2000((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485)) == pytest.approx(2.0425, abs=1e-4)
    assert ciede2000((50.0, 2.5, 0.0), (73.0, 25.0, -18.0)) == pytest.approx(27.1492, abs=1e-4)
    assert ciede2000((2.0776, 0.0795, -1.135), (0.9033, -0.0636, -0.5514)) == pytest.approx(0.9082, abs=1e-4)
    assert lab("#ffffff") == pytest.approx((100.0, 0.0, 0.0), abs=1e-3)


def test_wcag_contrast_and_simulation_basics():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # the classic just-failing grey
    assert luminance("#ffffff") == pytest.approx(1.0)
    for deficiency in ("protanopia", "deuteranopia", "tritanopia"):
        assert simulate("#808080", deficiency) == "#808080"  # greys look the same to everyone
    assert distance("#d62728", "#2ca02c", "deuteranopia") < 10 < distance("#d62728", "#2ca02c")  # red/green


@pytest.mark.parametrize("deficiency", list(MIN_DISTANCE))
def test_every_pair_of_run_colors_stays_apart(deficiency):
    worst = min(itertools.combinations(PALETTE, 2), key=lambda p: distance(*p, deficiency))
    assert distance(*worst, deficiency) >= MIN_DISTANCE[deficiency], (deficiency, worst)


@pytest.mark.parametrize("theme", THEMES, ids=lambda t: t.name)
def test_run_colors_show_on_the_chart_background(theme: Theme):
    """Curves, not text: no WCAG level applies, but none may fade into the background."""
    for c in PALETTE:
        assert contrast(c, theme.chart_bg) >= 2.0, (theme.name, c)


@pytest.mark.parametrize("theme", THEMES, ids=lambda t: t.name)
def test_every_text_pair_meets_wcag_aa(theme: Theme):
    failing = {(fg, bg): round(contrast(getattr(theme, fg), getattr(theme, bg)), 2) for fg, bg in TEXT_PAIRS
               if contrast(getattr(theme, fg), getattr(theme, bg)) < AA_TEXT}
    assert not failing, f"{theme.name}: {failing}"


@pytest.mark.parametrize("theme", THEMES, ids=lambda t: t.name)
def test_run_statuses_are_readable_and_tell_apart(theme: Theme):
    """Each status the run list knows has its own color, checked as text on the table (TEXT_PAIRS);
    the colors differ plainly (the icons' shapes tell them apart for color-blind eyes too)."""
    assert set(STATUSES) == set(SEVERITY) and status_role("weird") == "dim_text"
    assert {(status_role(s), "base") for s in STATUSES} <= set(TEXT_PAIRS)
    colors = [getattr(theme, status_role(s)) for s in STATUSES]
    worst = min(itertools.combinations(colors, 2), key=lambda p: distance(*p))
    assert distance(*worst) >= 15, (theme.name, worst)


def test_differing_config_values_stand_out_from_the_table():
    for theme in THEMES:
        assert ciede2000(lab(theme.diff_bg), lab(theme.base)) > 10, theme.name


def test_a_comparison_gets_the_first_colors_in_selection_order():
    book = RunColors()
    assert book.assign(["a", "b"]) == {"a": 0, "b": 1}  # blue and orange: the most distinct pair
    assert color(0) == PALETTE[0] and not dashed(5) and dashed(6) and color(6) == PALETTE[0]


def test_a_run_keeps_its_color_and_compared_runs_never_share_one():
    book = RunColors()
    assert book.assign(["a"]) == {"a": 0}
    assert book.assign(["b"]) == {"b": 1}  # alone too it takes an unused color: later comparisons keep theirs
    assert book.assign(["b", "a"]) == {"b": 1, "a": 0}
    for i in range(len(PALETTE)):  # every color now held by someone
        book.assign([f"r{i}"])
    one, other = book.slot("a"), book.slot("r4")
    assert one == other == 0  # the least used color came round again ...
    pair = book.assign(["r4", "a"])
    assert pair["r4"] == 0 and pair["a"] != 0  # ... and the later-selected run of the two moves
    assert book.assign(["a"]) == {"a": pair["a"]}  # where it stays
    many = book.assign([f"m{i}" for i in range(10)])
    assert len(set(many.values())) == 10  # more runs than colors: the rest dashed, still apart
    assert sum(dashed(s) for s in many.values()) == 10 - len(PALETTE)
