"""The team page at `/`: who is working where, what waits for a person, how the pipeline
and the memory are doing. Thin: ctxlake_site.team_page reads, the template shows.

Staff only, like the admin it links to (an anonymous visitor is sent to the admin login
and back); each person sees the fleets the admin shows them, nothing else.
"""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from ctxlake_site.team_page import team_page


@staff_member_required
def team(request: HttpRequest) -> HttpResponse:
    return render(request, "team/page.html", {"page": team_page(request.user)})
