"""The services tier: tests against a real flag service (Unleash with PostgreSQL), started once
per session by the ``unleash_service`` fixture (tests/services/fixture.py, registered in
tests/conftest.py for every tier)."""
