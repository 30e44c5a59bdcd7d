"""`{% daily_chart daily "title" %}`: a team_page.Daily drawn as an inline SVG bar chart."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from ctxlake_site.svg_charts import Series, bar_chart
from ctxlake_site.team_page import Daily

register = template.Library()


@register.simple_tag
def daily_chart(daily: Daily, title: str) -> SafeString:
    return bar_chart(title, daily.days, [Series(name, vals) for name, vals in daily.series.items()])
