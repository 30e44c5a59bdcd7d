from django.apps import AppConfig


class ClaimsConfig(AppConfig):
    name = "claims"
    verbose_name = "Fleet memory"

    def ready(self) -> None:
        from claims import staleness
        from fleet import signals

        # A REST lease claim or session end naming files marks claims citing them stale.
        signals.paths_reported.connect(
            staleness.on_paths_reported, dispatch_uid="claims.staleness"
        )
