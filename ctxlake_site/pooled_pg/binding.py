"""Parameters bound on the server, repeated statements prepared, and the two it cannot carry.

With settings.CTXLAKE_DB_PREPARE (the default) Django binds parameters on the server
(`server_side_binding`) and psycopg prepares a statement a connection has run
`prepare_threshold` times, so Postgres parses and plans it once per connection. With
Django's default, client-side binding, every statement's text carries its values: none
repeats, and Postgres parses and plans each one (write_cpu_ab.py, 2026-12-06: Postgres
3.7–4.5 → 2.3–3.3 ms of CPU an agent write, the whole server 13.9 → 11.9 ms, median of 3).

Binding on the server has two limits that Django's default does not, and `BindingCursor`
sends those statements as the default would, their values quoted into the text on the
client (psycopg's `ClientCursor.mogrify`, the same quoting), never prepared:
- a statement carries at most MAX_BOUND_PARAMS parameters (the protocol counts them in
  16 bits), and Django's PostgreSQL backend bounds no statement by it: a `pk__in` of a
  100k-claim delta, a `bulk_create` of thousands of rows;
- a value is sent in binary, so an integer wider than its column's type (Django wraps it
  in psycopg's Int4 / Int8) raises OverflowError in Python before anything is sent, where
  Postgres would refuse it with a DataError, as the database's own rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from django.db.backends.postgresql import base

if TYPE_CHECKING:  # Django's class, which its type stubs leave out: psycopg's Cursor
    _ServerBindingCursor = psycopg.Cursor[Any]
else:
    _ServerBindingCursor = base.ServerBindingCursor

#: The most parameters one statement may carry when they are bound on the server.
MAX_BOUND_PARAMS = 65535


class BindingCursor(_ServerBindingCursor):
    """Django's server-binding cursor; a statement it cannot bind goes as quoted text."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if params is not None and len(params) > MAX_BOUND_PARAMS:
            return self._quoted(query, params, kwargs)
        try:
            return super().execute(query, params, **kwargs)
        except OverflowError:  # raised while dumping, before the statement is sent
            return self._quoted(query, params, kwargs)

    def _quoted(self, query: Any, params: Any, kwargs: dict[str, Any]) -> Any:
        text = psycopg.ClientCursor(self.connection).mogrify(query, params)
        return super().execute(text, None, **{**kwargs, "prepare": False})
