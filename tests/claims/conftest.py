"""The REST fixtures live with the fleet tests; the claims API tests use the same ones."""

from tests.fleet.conftest import api_as, world  # noqa: F401
