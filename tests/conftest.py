"""Shared fixtures. ``make_runtime`` builds a Runtime from a settings text and an explicit
environment, without touching os.environ or the process-wide runtime.

No test writes into the user's home or cache. Before anything else, for the whole session and
every subprocess it starts:

- ``HOME`` is a fresh directory under the system temp dir, removed at the end of the session;
- ``XDG_CACHE_HOME`` is ``<repo>/.cache`` (git-ignored): the upgrade gate's fetched sglang wheels
  (``.cache/dsv41-flags/engines``, about 113 MB) and pip's download cache stay there, so a second
  run needs no network; ``rm -r .cache`` is always safe;
- ``XDG_CONFIG_HOME`` keeps pointing at the user's configuration directory (read, never written),
  so that ``pip download`` still finds a package index configured there.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_CACHE = REPO / ".cache"
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="dsv41-tests-home-"))
os.environ.setdefault("XDG_CONFIG_HOME", str(Path.home() / ".config"))
os.environ["HOME"] = str(_SESSION_HOME)
os.environ["XDG_CACHE_HOME"] = str(TEST_CACHE)
TEST_CACHE.mkdir(exist_ok=True)

import pytest  # noqa: E402  (after the environment above: nothing may read HOME before)

from dsv41_flags.assembly import build  # noqa: E402
from dsv41_flags.runtime import Runtime  # noqa: E402
from tests.services.fixture import unleash_service  # noqa: E402,F401  (one Unleash per session)


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_HOME, ignore_errors=True)

FEATURES_DIR = (REPO / "features").resolve()  # a symlink to the shipped src/dsv41_flags/_data/features
REPO_SETTINGS = (REPO / "settings.toml").resolve()  # a symlink to the shipped src/dsv41_flags/_data/settings.toml
#: one deployment's settings ([tp3], [tp4], its prefixes and volatile names): the docs' example
EXAMPLE_SETTINGS = REPO / "docs" / "examples" / "deployment-settings.toml"


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
