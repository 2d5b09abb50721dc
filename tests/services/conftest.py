"""The services tier: tests against a real flag service (Unleash with PostgreSQL), started once
per session by the ``unleash_service`` fixture (tests/services/fixture.py)."""
from .fixture import unleash_service  # noqa: F401  (registers the fixture for this directory)
