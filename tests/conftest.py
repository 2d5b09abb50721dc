"""Shared fixtures. ``make_runtime`` builds a Runtime from a settings text and an explicit
environment, without touching os.environ or the process-wide runtime."""
from __future__ import annotations

from pathlib import Path

import pytest

from dsv41_flags.runtime import Runtime, build

REPO = Path(__file__).resolve().parents[1]
FEATURES_DIR = (REPO / "features").resolve()  # a symlink to the shipped src/dsv41_flags/_data/features
REPO_SETTINGS = (REPO / "settings.toml").resolve()  # a symlink to the shipped src/dsv41_flags/_data/settings.toml


@pytest.fixture
def make_runtime(tmp_path):
    """``make_runtime(settings=None | str, env=None | dict, profile=None, argv=(), features_dir=
    FEATURES_DIR) -> Runtime``; ``settings`` is TOML text written to tmp_path/settings.toml
    (None: the repo's settings.toml). Runtimes are uninstalled at teardown."""
    made: list[Runtime] = []

    def _make(settings: str | None = None, env: dict | None = None, profile: str | None = None,
              argv=(), features_dir: Path = FEATURES_DIR) -> Runtime:
        if settings is None:
            path = REPO_SETTINGS
        else:
            path = tmp_path / "settings.toml"
            path.write_text(settings)
        rt = build([path], profile, environ=dict(env or {}), argv=list(argv),
                   features_dir=features_dir, use_snapshot=False, configure_logging=False)
        made.append(rt)
        return rt

    yield _make
    for rt in made:
        rt.uninstall()
