"""Bar charts as inline SVG, built on the server: no JavaScript, no CDN, nothing to load.

The team page refreshes itself every 30 seconds and must read without JavaScript, so a
chart is markup like the rest of the page. Each bar carries a <title> (its day and value,
shown on hover and read by screen readers); colours come from CSS classes (`bar-0`,
`bar-1`, …) so the stylesheet owns them, dark mode included. The viewBox is about a
phone's width, so the labels stay legible where the chart is drawn at its natural size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 360, 150
LEFT, RIGHT, TOP, BOTTOM = 30, 6, 8, 20  # room for the axis labels
GAP = 0.2  # of each day's slot, left empty between days


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[int]  # one per day, in the order of the chart's days


def bar_chart(title: str, days: Sequence[date], series: Sequence[Series]) -> SafeString:
    """An <svg> of `series` as bars per day, side by side, with a y scale and day labels."""
    top = _ceiling(max((v for s in series for v in s.values), default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(days), 1)
    bar_w = slot * (1 - GAP) / max(len(series), 1)
    bars = []
    for i, day in enumerate(days):
        for k, s in enumerate(series):
            value = s.values[i]
            h = plot_h * value / top
            x = LEFT + i * slot + slot * GAP / 2 + k * bar_w
            bars.append(
                (k, _n(x), _n(TOP + plot_h - h), _n(bar_w), _n(h), day.isoformat(), s.label, value)
            )
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{}</title>{}{}{}</svg>',
        WIDTH,
        HEIGHT,
        title,
        title,
        _axis(top, plot_h),
        _day_labels(days, slot),
        format_html_join(
            "",
            '<rect class="bar bar-{}" x="{}" y="{}" width="{}" height="{}">'
            "<title>{} · {}: {}</title></rect>",
            bars,
        ),
    )


def _ceiling(peak: int) -> int:
    """A round, even top for the y scale, at least `peak`: the half-way line is then a
    whole number too, and a chart of zeros still has a scale (0 to 2)."""
    for step in (2, 4, 6, 8, 10, 20, 30, 40, 50, 60, 80, 100):
        if peak <= step:
            return step
    magnitude: int = 10 ** (len(str(peak)) - 1)  # int ** int is Any to mypy
    return -(-peak // magnitude) * magnitude


def _axis(top: int, plot_h: float) -> SafeString:
    """Grid lines at 0, half and the top, each labelled on the left."""
    lines = [(TOP + plot_h * (1 - f), f * top) for f in (0, 0.5, 1)]
    return format_html_join(
        "",
        '<line class="gridline" x1="{}" x2="{}" y1="{}" y2="{}"/>'
        '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>',
        ((LEFT, WIDTH - RIGHT, _n(y), _n(y), LEFT - 4, _n(y + 3.5), f"{v:g}") for y, v in lines),
    )


def _day_labels(days: Sequence[date], slot: float) -> SafeString:
    """The first, middle and last day under the bars (every day would not fit a phone)."""
    if not days:
        return mark_safe("")
    picks = sorted({0, len(days) // 2, len(days) - 1})
    anchors = {0: "start", len(days) - 1: "end"}
    return format_html_join(
        "",
        '<text class="tick" x="{}" y="{}" text-anchor="{}">{}</text>',
        (
            (
                _n(_label_x(i, len(days), slot)),
                HEIGHT - 5,
                anchors.get(i, "middle"),
                days[i].strftime("%b %-d"),
            )
            for i in picks
        ),
    )


def _label_x(i: int, n: int, slot: float) -> float:
    if i == 0:
        return LEFT
    if i == n - 1:
        return WIDTH - RIGHT
    return LEFT + (i + 0.5) * slot


def _n(value: float) -> str:
    """A coordinate to one decimal (format_html escapes its arguments, so they go in as
    strings, and a tenth of a unit is finer than any screen draws this chart)."""
    return f"{value:.1f}"
