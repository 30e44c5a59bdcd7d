"""The team page's template helpers.

`{% daily_chart daily "title" %}` draws a team_page.Daily as an inline SVG bar chart;
`{{ moment|age:now }}` is pipeline_status.age ("3m 12s", "never"), the format the admin's
pipeline panel and `doctor` use, so the three read alike.
"""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.safestring import SafeString

from ctxlake_site import pipeline_status
from ctxlake_site.svg_charts import Series, bar_chart
from ctxlake_site.team_page import Daily

register = template.Library()


@register.simple_tag
def daily_chart(daily: Daily, title: str) -> SafeString:
    return bar_chart(title, daily.days, [Series(name, vals) for name, vals in daily.series.items()])


@register.filter
def age(moment: datetime | None, now: datetime) -> str:
    return pipeline_status.age(moment, now)
