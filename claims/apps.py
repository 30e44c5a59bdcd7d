from django.apps import AppConfig


class ClaimsConfig(AppConfig):
    name = "claims"
    verbose_name = "Fleet memory"

    def ready(self) -> None:
        from claims import admin_scope, staleness
        from fleet import scope, signals

        # Who may moderate is Claims' permission; Fleet's REST roles ask through this.
        scope.hand_over_moderator_rule(admin_scope.is_moderator)

        # A REST lease claim or session end naming files marks claims citing them stale.
        signals.paths_reported.connect(
            staleness.on_paths_reported, dispatch_uid="claims.staleness"
        )
