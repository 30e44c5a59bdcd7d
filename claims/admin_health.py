"""The memory-health page: per fleet, the promoted claims to look at again (unused,
failing, flagged by agents, possibly stale, contradicting), with bulk actions that go
through claims.moderation (contest, retract, send back for review, set valid-until), one
claim at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from claims import admin_scope, health, moderation
from claims.models import Claim

if TYPE_CHECKING:
    from claims.admin import ClaimAdmin

ACTIONS = {"contest": "Contest", "retract": "Retract", "send_back": "Send back for review",
           "valid_until": "Set valid until"}
#: The actions that must say why.
NOTE_NEEDED = ("contest", "retract", "send_back")


class HealthActionForm(forms.Form):
    action = forms.ChoiceField(choices=list(ACTIONS.items()))
    claims = forms.TypedMultipleChoiceField(coerce=int, choices=())
    note = forms.CharField(required=False, max_length=2000)
    valid_until = forms.DateTimeField(required=False)

    def __init__(self, *args: Any, choices: list[tuple[int, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["claims"].choices = choices  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("action") in NOTE_NEEDED and not data.get("note", "").strip():
            raise forms.ValidationError("Say why: contest, retract and send back need a note.")
        return data


def health_view(admin: ClaimAdmin, request: HttpRequest) -> HttpResponse:
    fleets = list(admin_scope.granted_fleets(request.user).order_by("slug"))
    fleet = next((f for f in fleets if f.slug == request.GET.get("fleet")), None) or \
        (fleets[0] if fleets else None)
    if fleet is None:
        messages.info(request, "You moderate no fleet.")
        return HttpResponseRedirect(reverse("admin:index"))
    now = timezone.now()
    found = health.of_fleet(fleet, now=now, days=_days(request))
    listed = {c.pk: c for c in [*found.unserved, *found.failing, *found.flagged, *found.stale]}
    for pair in found.conflicting:
        listed.update({pair.claim.pk: pair.claim, pair.other.pk: pair.other})
    form = HealthActionForm(request.POST or None, choices=[(pk, c.public_id)
                                                           for pk, c in listed.items()])
    if request.method == "POST" and form.is_valid():
        _act(admin, request, [listed[pk] for pk in form.cleaned_data["claims"]],
             form.cleaned_data)
        return HttpResponseRedirect(request.get_full_path())
    context = {**admin.admin_site.each_context(request), "title": f"Memory health · {fleet.slug}",
               "opts": Claim._meta, "fleet": fleet, "fleets": fleets, "health": found,
               "counts": found.counts(), "days": _days(request), "form": form,
               "actions": ACTIONS, "failed_min": health.FAILED_MIN}
    return TemplateResponse(request, "admin/claims/claim/health.html", context)


def _days(request: HttpRequest) -> int:
    raw = request.GET.get("days", "")
    return int(raw) if raw.isdigit() and 1 <= int(raw) <= 3650 else health.UNSERVED_DAYS


def _act(admin: ClaimAdmin, request: HttpRequest, claims: list[Claim],
         data: dict[str, Any]) -> None:
    done, refused = 0, []
    for claim in claims:
        try:
            if data["action"] == "valid_until":
                moderation.set_valid_until(claim, by=request.user, until=data["valid_until"],
                                           note=data["note"])
            elif data["action"] == "contest":
                moderation.contest_claim(claim, by=request.user, note=data["note"])
            elif data["action"] == "send_back":
                moderation.send_back_claim(claim, by=request.user, note=data["note"])
            else:
                moderation.retract_claim(claim, by=request.user, note=data["note"])
            done += 1
        except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
            refused.append(f"{claim.public_id}: {exc}")
    admin.message_user(request, f"{ACTIONS[data['action']]}: {done} claim(s).",
                       messages.SUCCESS if done else messages.WARNING)
    for line in refused[:20]:
        admin.message_user(request, line, messages.ERROR)
