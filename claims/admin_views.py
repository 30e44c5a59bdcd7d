"""The review page's buttons and the queue's bulk actions: validate, delegate, report.

Every handler calls one function of claims.moderation and turns its answer into a
message for the moderator. Nothing here decides: the promotion gate refuses (GateRefused),
a lost race is reported (AlreadyDecided), and the person is told which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib import messages
from django.contrib.admin import helpers
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from claims import admin_forms, contradictions, moderation, release, usefulness
from claims.models import Claim, ClaimFeedback, Contradiction

if TYPE_CHECKING:
    from claims.admin import ClaimAdmin

BULK_LIMIT = 500  # one request promotes at most this many; keeps a request short
CONFIRM_SHOWN = 100

Handler = Callable[["ClaimAdmin", HttpRequest, Claim], HttpResponse]


def queue_url() -> str:
    return reverse("admin:claims_claim_review")


def claim_url(claim: Claim) -> str:
    return reverse("admin:claims_claim_change", args=(claim.pk,))


def _refused(admin: ClaimAdmin, request: HttpRequest, exc: Exception) -> None:
    if isinstance(exc, moderation.AlreadyDecided):
        admin.message_user(request, f"Someone got there first: {exc}.", messages.WARNING)
    else:
        admin.message_user(request, f"Refused: {exc}", messages.ERROR)


def _invalid(
    admin: ClaimAdmin, request: HttpRequest, claim: Claim, form: forms.Form
) -> HttpResponse:
    # A bound form's errors are message strings (the stub also allows ValidationErrors).
    problems = "; ".join(f"{k}: {' '.join(cast('list[str]', v))}" for k, v in form.errors.items())
    admin.message_user(request, f"Nothing done to {claim.public_id}: {problems}", messages.ERROR)
    return HttpResponseRedirect(claim_url(claim))


def promote(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    form = admin_forms.PromoteForm(request.POST)
    if not form.is_valid():
        return _invalid(admin, request, claim, form)
    try:
        moderation.promote_claim(claim, by=request.user, note=form.cleaned_data["note"])
    except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
        _refused(admin, request, exc)
        return HttpResponseRedirect(claim_url(claim))
    admin.message_user(
        request, f"Promoted {claim.public_id}; agents will see it.", messages.SUCCESS
    )
    return HttpResponseRedirect(queue_url())


def reject(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    form = admin_forms.RejectForm(request.POST)
    if not form.is_valid():
        return _invalid(admin, request, claim, form)
    try:
        moderation.reject_claim(claim, by=request.user, reason=form.cleaned_data["reason"])
    except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
        _refused(admin, request, exc)
        return HttpResponseRedirect(claim_url(claim))
    admin.message_user(request, f"Rejected {claim.public_id}.", messages.SUCCESS)
    return HttpResponseRedirect(queue_url())


def edit(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    """Reword, and with `and_promote` promote the new wording in the same click."""
    form = admin_forms.EditForm(request.POST)
    if not form.is_valid():
        return _invalid(admin, request, claim, form)
    try:
        claim = moderation.edit_claim(
            claim, by=request.user, text=form.cleaned_data["text"], note=form.cleaned_data["note"]
        )
    except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
        _refused(admin, request, exc)
        return HttpResponseRedirect(claim_url(claim))
    admin.message_user(request, f"Edited {claim.public_id}; the original is in its history.")
    if "and_promote" in request.POST:
        return promote(admin, request, claim)
    return HttpResponseRedirect(claim_url(claim))


def merge(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    form = admin_forms.MergeForm(request.POST, claim=claim)
    if not form.is_valid():
        return _invalid(admin, request, claim, form)
    target: Claim = form.cleaned_data["into"]
    try:
        target = moderation.merge_claim(claim, into=target, by=request.user)
    except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
        _refused(admin, request, exc)
        return HttpResponseRedirect(claim_url(claim))
    target.refresh_from_db()
    admin.message_user(
        request,
        f"Merged {claim.public_id} into {target.public_id} as corroboration "
        f"({target.independent_sessions} independent sessions now).",
        messages.SUCCESS,
    )
    return HttpResponseRedirect(queue_url())


def _supersede(this_is_old: bool) -> Handler:
    """ "supersede" (this claim is replaced by the one named) and "replace" (this claim
    replaces the one named): both are moderation.supersede_claim."""

    def handler(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
        form = admin_forms.OtherClaimForm(request.POST, claim=claim)
        if not form.is_valid():
            return _invalid(admin, request, claim, form)
        other: Claim = form.cleaned_data["other"]
        old, new = (claim, other) if this_is_old else (other, claim)
        try:
            moderation.supersede_claim(
                old, by=request.user, new=new, note=form.cleaned_data["note"]
            )
        except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
            _refused(admin, request, exc)
            return HttpResponseRedirect(claim_url(claim))
        admin.message_user(
            request,
            f"Superseded {old.public_id} by {new.public_id}; agents stop seeing "
            f"{old.public_id} at the next render.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(claim_url(claim))

    return handler


def valid_until(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    form = admin_forms.ValidUntilForm(request.POST)
    if not form.is_valid():
        return _invalid(admin, request, claim, form)
    until = form.cleaned_data["valid_until"]
    try:
        moderation.set_valid_until(
            claim, by=request.user, until=until, note=form.cleaned_data["note"]
        )
    except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
        _refused(admin, request, exc)
    else:
        said = f"valid until {until:%Y-%m-%d %H:%M %Z}" if until else "valid indefinitely"
        admin.message_user(request, f"{claim.public_id} is {said}.", messages.SUCCESS)
    return HttpResponseRedirect(claim_url(claim))


def release_text(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    """"Release flagged text": the claim's text and its excerpts reach agents as written
    (claims.release, audited); the page then shows who released it."""
    form = admin_forms.ReleaseForm(request.POST)
    if not form.is_valid():
        return _invalid(admin, request, claim, form)
    try:
        release.release_text(claim, by=request.user, note=form.cleaned_data["note"])
    except (moderation.GateRefused, release.NothingToRelease) as exc:
        _refused(admin, request, exc)
    else:
        admin.message_user(request, f"Released the flagged text of {claim.public_id}; "
                           "agents see it as written.", messages.SUCCESS)
    return HttpResponseRedirect(claim_url(claim))


def _noted(verb: str, fn: Callable[..., Claim]) -> Handler:
    def handler(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
        form = admin_forms.NoteForm(request.POST)
        if not form.is_valid():
            return _invalid(admin, request, claim, form)
        try:
            fn(claim, by=request.user, note=form.cleaned_data["note"])
        except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
            _refused(admin, request, exc)
        else:
            admin.message_user(request, f"{verb} {claim.public_id}.", messages.SUCCESS)
        return HttpResponseRedirect(claim_url(claim))

    return handler


def confidence(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    form = admin_forms.ConfidenceForm(request.POST)
    if not form.is_valid():
        return _invalid(admin, request, claim, form)
    value = form.cleaned_data["confidence"]
    try:
        usefulness.set_confidence(claim, by=request.user, value=value,
                                  note=form.cleaned_data["note"])
    except (moderation.GateRefused, ValueError) as exc:
        _refused(admin, request, exc)
    else:
        said = f"set to {value:.2f}" if value is not None else "derived again"
        admin.message_user(request, f"{claim.public_id}'s confidence is {said}.",
                           messages.SUCCESS)
    return HttpResponseRedirect(claim_url(claim))


def feedback(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    """Close one agent feedback on this claim (dismissed, or acted on)."""
    form = admin_forms.ResolveForm(request.POST)
    if not form.is_valid() or not form.cleaned_data["resolution"]:
        return _invalid(admin, request, claim, form)
    fb = ClaimFeedback.objects.filter(claim=claim, pk=form.cleaned_data["item"]).first()
    if fb is None:
        admin.message_user(request, "No such feedback on this claim.", messages.ERROR)
        return HttpResponseRedirect(claim_url(claim))
    try:
        usefulness.resolve_feedback(fb, by=request.user, note=form.cleaned_data["note"],
                                    resolution=form.cleaned_data["resolution"])
    except (moderation.GateRefused, usefulness.AlreadyResolved) as exc:
        _refused(admin, request, exc)
    else:
        admin.message_user(request, f"Feedback on {claim.public_id} "
                           f"{form.cleaned_data['resolution']}.", messages.SUCCESS)
    return HttpResponseRedirect(claim_url(claim))


def not_a_conflict(admin: ClaimAdmin, request: HttpRequest, claim: Claim) -> HttpResponse:
    form = admin_forms.ResolveForm(request.POST)
    if not form.is_valid():
        return _invalid(admin, request, claim, form)
    pair = (Contradiction.objects.filter(pk=form.cleaned_data["item"])
            .filter(Q(claim=claim) | Q(other=claim)).select_related("claim", "other").first())
    if pair is None:
        admin.message_user(request, "No such contradiction on this claim.", messages.ERROR)
        return HttpResponseRedirect(claim_url(claim))
    try:
        contradictions.dismiss(pair, by=request.user, note=form.cleaned_data["note"])
    except moderation.GateRefused as exc:
        _refused(admin, request, exc)
    else:
        admin.message_user(request, f"{pair} marked as not a conflict.", messages.SUCCESS)
    return HttpResponseRedirect(claim_url(claim))


HANDLERS: dict[str, Handler] = {
    "promote": promote,
    "reject": reject,
    "edit": edit,
    "merge": merge,
    "contest": _noted("Contested", moderation.contest_claim),
    "retract": _noted("Retracted", moderation.retract_claim),
    "supersede": _supersede(this_is_old=True),
    "replace": _supersede(this_is_old=False),
    "valid_until": valid_until,
    "release": release_text,
    "confidence": confidence,
    "feedback": feedback,
    "not_a_conflict": not_a_conflict,
}


# Bulk actions: the first POST shows a confirmation page; its "post" field carries the go.


def bulk(
    admin: ClaimAdmin, request: HttpRequest, queryset: QuerySet[Claim], *, verb: str
) -> TemplateResponse | None:
    """Promote or reject the selected claims after a confirmation page; report refusals."""
    claims = list(queryset.select_related("fleet").order_by("created_at", "pk")[: BULK_LIMIT + 1])
    if len(claims) > BULK_LIMIT:
        admin.message_user(
            request, f"Select at most {BULK_LIMIT} claims at a time.", messages.ERROR
        )
        return None
    form = admin_forms.BulkRejectForm(request.POST if "post" in request.POST else None)
    if "post" not in request.POST or (verb == "reject" and not form.is_valid()):
        return _confirmation(admin, request, claims, verb=verb, form=form)
    done, refused = 0, []
    for claim in claims:
        try:
            if verb == "promote":
                moderation.promote_claim(claim, by=request.user)
            else:
                moderation.reject_claim(claim, by=request.user, reason=form.cleaned_data["reason"])
            done += 1
        except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
            refused.append(str(exc))
    _report(admin, request, verb, done, refused)
    return None


def _report(
    admin: ClaimAdmin, request: HttpRequest, verb: str, done: int, refused: list[str]
) -> None:
    past = "Promoted" if verb == "promote" else "Rejected"
    if not refused:
        admin.message_user(request, f"{past} {done}.", messages.SUCCESS)
        return
    admin.message_user(
        request, f"{past} {done}; {len(refused)} refused: " + "; ".join(refused), messages.WARNING
    )


def _confirmation(
    admin: ClaimAdmin,
    request: HttpRequest,
    claims: list[Claim],
    *,
    verb: str,
    form: forms.Form,
) -> TemplateResponse:
    shown = claims[:CONFIRM_SHOWN]
    rows = [(c, moderation.gate_problems(c) if verb == "promote" else []) for c in shown]
    context: dict[str, Any] = {
        **admin.admin_site.each_context(request),
        "title": f"{verb.capitalize()} {len(claims)} claim(s)?",
        "opts": admin.model._meta,
        "verb": verb,
        "action": request.POST.get("action", ""),
        "rows": rows,
        "hidden_count": len(claims) - len(shown),
        "refused_count": sum(1 for _, problems in rows if problems),
        "selected_ids": [c.pk for c in claims],
        "form": form if verb == "reject" else None,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/claims/claim/bulk_confirm.html", context)
