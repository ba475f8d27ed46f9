"""Which charts the Charts tab shows and in what order: pins, search, constant charts folded."""

from __future__ import annotations

from pilothouse.gui.chart_layout import arrange, constant_value, folded_text, matches

TRL = ["clip_ratio/high_max", "clip_ratio/low_mean", "completions/mean_length", "entropy", "kl", "loss",
       "reward", "reward_std", "rewards/letter_a/mean"]


def test_the_grid_is_by_importance_with_pins_first_in_pin_order():
    assert arrange(TRL).shown[:3] == ["reward", "reward_std", "rewards/letter_a/mean"]
    grid = arrange(TRL, pinned=["loss", "entropy", "gone"])  # a pin of a metric this run lacks: ignored
    assert grid.shown[:3] == ["loss", "entropy", "reward"] and len(grid.shown) == len(TRL)


def test_search_by_words_or_glob_case_insensitively():
    assert matches("rewards/letter_a/mean", "LETTER mean") and not matches("reward", "letter")
    assert arrange(TRL, query="clip_ratio/*").shown == ["clip_ratio/low_mean", "clip_ratio/high_max"]
    assert arrange(TRL, query="rew*").shown == ["reward", "reward_std", "rewards/letter_a/mean"]
    assert arrange(TRL, query="  ").shown == arrange(TRL).shown  # blank: everything
    assert arrange(TRL, query="nothing-like-it").shown == []


def test_constant_charts_fold_unless_shown_pinned_or_searched():
    flat = {"clip_ratio/high_max": 0.0, "clip_ratio/low_mean": 0.0}
    grid = arrange(TRL, constant=flat)
    assert set(grid.folded) == set(flat) and not set(flat) & set(grid.shown)
    assert arrange(TRL, constant=flat, show_constant=True).folded == []
    assert "clip_ratio/high_max" in arrange(TRL, pinned=["clip_ratio/high_max"], constant=flat).shown
    assert arrange(TRL, query="clip", constant=flat).shown == ["clip_ratio/low_mean", "clip_ratio/high_max"]
    text = folded_text(grid.folded, flat)
    assert text.startswith("2 constant charts folded:") and "clip_ratio/low_mean = 0" in text
    many = {f"m{i}": float(i) for i in range(9)}
    assert folded_text(sorted(many), many).endswith("m5 = 5 and 3 more")


def test_a_chart_is_constant_only_with_one_finite_value_over_more_than_one_x():
    assert constant_value([(0.0, 0.0), (0.0, 0.0)], [(0, 9), (0, 4)], True) == 0.0
    assert constant_value([(0.0, 0.0), (1.0, 1.0)], [(0, 9), (0, 4)], True) is None  # two runs, two values
    assert constant_value([(0.0, 1.0)], [(0, 9)], True) is None
    assert constant_value([(2.0, 2.0), (2.0, 2.0)], [(0, 0), (0, 0)], True) is None  # first points: too soon
    assert constant_value([(2.0, 2.0)], [(0, 9)], False) is None  # a NaN/Inf is a gap worth seeing
    assert constant_value([None], [(0, 9)], True) is None and constant_value([], [], True) is None
    assert constant_value([(-0.0, 0.0)], [(0, 1)], True) == 0.0  # -0.0 and 0.0 read the same
