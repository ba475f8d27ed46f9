"""How the fetch thread of ``RemoteTiers`` turns the charts' wants into requests (``together``) and
when an answer at hand is good enough for a view (``serves``): the linked charts of a run, a few
pixels apart, are asked in one request that serves each of them."""

from __future__ import annotations

from pilothouse.gui.remote_tiers import ALL, COARSER, PAD, serves, together


def test_linked_charts_a_few_pixels_apart_share_one_request_that_serves_each():
    wants = [("loss", (2_500_000.0, 7_500_000.0, 669)),  # the charts of one pan, their axes a little apart
             ("lr", (2_468_203.2, 7_500_000.0, 675)),
             ("grad", (2_587_440.1, 7_500_000.0, 663)),
             ("acc", (2_500_000.0, 7_500_000.0, 669))]
    asks = together(wants)
    assert len(asks) == 1
    (x0, x1, pixels), metrics = asks[0]
    assert sorted(metrics) == ["acc", "grad", "loss", "lr"]
    assert all(serves((x0, x1, pixels), span) for _, span in wants)
    assert x0 < 2_468_203.2 and x1 > 7_500_000.0  # padded past every chart's edges
    assert pixels <= (1 + 2 * PAD) * 675 * COARSER  # about one chart's width of columns, not the sum


def test_ranges_far_apart_summaries_and_empty_ranges_are_asked_as_they_are():
    wants = [("loss", (0.0, 1000.0, 600)), ("lr", (5_000_000.0, 9_000_000.0, 600)),
             ("acc", (*ALL, 1)), ("grad", (*ALL, 1)), ("flat", (7.0, 7.0, 600))]
    asks = dict((tuple(metrics), span) for span, metrics in together(wants))
    assert asks[("acc", "grad")] == (*ALL, 1) and asks[("flat",)] == (7.0, 7.0, 600)
    assert serves(asks[("loss",)], (0.0, 1000.0, 600)) and not serves(asks[("loss",)], (5e6, 9e6, 600))
    assert serves(asks[("lr",)], (5e6, 9e6, 600))
    assert len(asks) == 4


def test_an_answer_serves_a_view_it_covers_on_about_as_many_columns():
    got = (980.0, 2020.0, 1040)  # one step per column
    assert serves(got, (1000.0, 2000.0, 1000))
    assert serves(got, (1010.0, 2010.0, 1000))  # a small pan stays inside the padding
    assert not serves(got, (900.0, 1900.0, 1000))  # a pan past its edge
    assert not serves(got, (1000.0, 2000.0, 3000))  # three times the columns: zoomed in, or a wider chart
    assert not serves(got, (1000.0, 1100.0, 1000))  # zoomed in ten times: its columns are too coarse
    assert not serves(got, (1000.0, 2000.0, 100))  # a chart a tenth as wide: its columns too fine, asked again
    assert serves((*ALL, 1), (*ALL, 1)) and not serves((*ALL, 1), (0.0, 10.0, 100))
