from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from ctxlake_site import embedded_db

_ready: set[str] = set()  # databases this process has already made sure exist


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        server = embedded_db.attach()
        params["host"] = str(server.socket_dir)
        params.pop("port", None)
        name = params.get("dbname", "postgres")
        if name not in _ready:
            embedded_db.ensure_database(server, name)
            _ready.add(name)
        return params
