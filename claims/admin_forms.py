"""The small forms behind the review page's buttons: shape and validation only.

Each form checks what a person typed; whether the action is allowed is decided by
claims.moderation when the admin calls it.
"""

from __future__ import annotations

from django import forms

from claims.models import Claim


class NoteForm(forms.Form):
    """Contest and retract: say why, for the audit trail and the next moderator."""

    note = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=2000)


class PromoteForm(forms.Form):
    note = forms.CharField(required=False, max_length=2000)


class RejectForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=2000)


class EditForm(forms.Form):
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=4000)
    note = forms.CharField(required=False, max_length=2000)


class MergeForm(forms.Form):
    """Merge into another claim of the same fleet, named by its public id (cc-NN)."""

    into = forms.CharField(max_length=20, label="Merge into (cc-NN)")

    def __init__(self, *args: object, claim: Claim, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.claim = claim

    def clean_into(self) -> Claim:
        # The lookup starts from the claim's own fleet: another fleet's id finds nothing.
        public_id = self.cleaned_data["into"]
        target = Claim.objects.for_fleet(self.claim.fleet).by_public_id(public_id).first()
        if target is None or target.pk == self.claim.pk:
            raise forms.ValidationError(f"No other claim {public_id} in this fleet.")
        if target.status in (Claim.Status.REJECTED, Claim.Status.RETRACTED):
            raise forms.ValidationError(
                f"{target.public_id} is {target.status}; merge into a live claim instead."
            )
        return target


class OtherClaimForm(forms.Form):
    """Names another claim of the same fleet by public id (supersede either way round)."""

    other = forms.CharField(max_length=20, label="Claim (cc-NN)")
    note = forms.CharField(required=False, max_length=2000)

    def __init__(self, *args: object, claim: Claim, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.claim = claim

    def clean_other(self) -> Claim:
        public_id = self.cleaned_data["other"]
        target = Claim.objects.for_fleet(self.claim.fleet).by_public_id(public_id).first()
        if target is None or target.pk == self.claim.pk:
            raise forms.ValidationError(f"No other claim {public_id} in this fleet.")
        return target


class ValidUntilForm(forms.Form):
    valid_until = forms.DateTimeField(
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Blank: holds indefinitely. In the site's time zone.",
    )
    note = forms.CharField(required=False, max_length=2000)


class BulkRejectForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), max_length=2000, label="Reason (for every one)"
    )


class ReleaseForm(forms.Form):
    """Release flagged text: an optional note for the audit (why it is a plain observation)."""

    note = forms.CharField(required=False, max_length=2000, label="Why it is safe (optional)")


class ConfidenceForm(forms.Form):
    """A moderator sets a claim's confidence outright, or clears it back to the derived one."""

    confidence = forms.FloatField(required=False, min_value=0.0, max_value=1.0,
                                  help_text="0–1. Blank: back to the value the fleet's "
                                            "sessions and feedback derive.")
    note = forms.CharField(required=False, max_length=2000)


class ResolveForm(forms.Form):
    """Close an agent's feedback, or say two claims do not conflict."""

    item = forms.IntegerField(min_value=1, max_value=2**62)
    resolution = forms.ChoiceField(choices=(("dismissed", "dismiss"), ("acted", "acted on")),
                                   required=False)
    note = forms.CharField(required=False, max_length=2000)
