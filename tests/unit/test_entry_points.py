"""Features shipped by other packages through the entry-point group dsv41_flags.features."""
import json

import pytest

from dsv41_flags import DeclarationError
from dsv41_flags._discovery import discover
from dsv41_flags._runtime import build


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A real (tiny) installed distribution on sys.path declaring one feature entry point."""
    (tmp_path / "shipped_feature.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='shipped', target='json', install=lambda m, c: None, summary='s', engine='')\n")
    info = tmp_path / "shipped_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shipped-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[dsv41_flags.features]\nshipped = shipped_feature:FEATURE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_entry_point_feature_discovered_and_kept_in_snapshot(shipped, tmp_path):
    features = {f.name: f for f in discover(None)}
    assert features["shipped"].entry_point == ("shipped", "shipped_feature:FEATURE")
    assert "entry point shipped" in features["shipped"].source
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\nshipped = true\n")
    rt = build([settings], None, environ={}, argv=[], use_snapshot=False, configure_logging=False)
    assert rt.value(rt.features["shipped"]) is True
    snap = json.loads(rt.snapshot())
    assert ["shipped", "shipped_feature:FEATURE"] in snap["entry_points"]
    child = build(None, None, environ={"DSV41_SNAPSHOT": rt.snapshot()}, argv=[], configure_logging=False)
    assert child.from_snapshot and "shipped" in child.features and child.value(child.features["shipped"])


def test_broken_entry_point_is_named(shipped):
    (shipped / "shipped_pkg-1.0.dist-info" / "entry_points.txt").write_text(
        "[dsv41_flags.features]\nshipped = shipped_feature:NOPE\n")
    with pytest.raises(DeclarationError, match="entry point shipped = shipped_feature:NOPE"):
        discover(None)
