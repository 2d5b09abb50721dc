"""The pytest fixture of the real Unleash server (``tests/services/unleash.py``).

``unleash_service`` is session-scoped: one Unleash with its PostgreSQL boots on first use
(about 7 s here, the first boot runs Unleash's migrations) and is stopped at the end of the run.
Tests share it, so each test names its own flags (``dsv41.<test>...``) and never relies on a flag
another test made. Register it with ``from tests.services.fixture import unleash_service`` in a
conftest.py (tests/services/conftest.py does for this directory).

It skips, with the reason, only when the install step has not run (no ``.cache/unleash/
install.env``: ``./dev setup`` or ``tests/services/install.sh`` makes it). With
``DSV41_REQUIRE_SERVICES=1`` in the environment that skip is a failure instead. A failing boot is
an error, never a skip.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .unleash import INSTALL_DIR, Installation, UnleashService


@pytest.fixture(scope="session")
def unleash_service() -> Iterator[UnleashService]:
    """A started UnleashService (see its docstring for ``url``, ``client_token``, ``admin_token``
    and the Admin API helpers), stopped at the end of the session."""
    installation = Installation.load()
    if installation is None:
        reason = (f"the Unleash test service is not installed ({INSTALL_DIR / 'install.env'} is "
                  f"missing): run ./dev setup (or tests/services/install.sh)")
        if os.environ.get("DSV41_REQUIRE_SERVICES"):
            pytest.fail(reason)
        pytest.skip(reason)
    service = UnleashService(installation)
    service.start()
    try:
        yield service
    finally:
        service.stop()
