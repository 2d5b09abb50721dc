"""Features shipped by other packages through the entry-point group dsv41_flags.features."""
import json

import pytest

from dsv41_flags import DeclarationError
from dsv41_flags.discovery import discover
from dsv41_flags.assembly import build


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


# ---------------------------------------------------- the scan: only parse what names the group
def _dist(root, name, entry_points):
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def test_scan_returns_what_importlib_metadata_returns(tmp_path, monkeypatch):
    """Same entry points, same order as the library's own scan, for every kind of header and for a
    distribution shadowed by one of the same name earlier on sys.path."""
    import importlib.metadata

    from dsv41_flags.discovery import ENTRY_POINT_GROUP, installed_entry_points

    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "shadowed-pkg", "[console_scripts]\nx = x:main\n")  # wins: no features here
    _dist(second, "shadowed-pkg", "[dsv41_flags.features]\nhidden = hidden:FEATURE\n")
    _dist(second, "brackets-pkg", "[[dsv41_flags.features]]\n b = b_mod:FEATURE \n# c\n")
    _dist(second, "spaced-pkg", "[ dsv41_flags.features ]\nnot_this = s:FEATURE\n")
    _dist(second, "plain-pkg", "[dsv41_flags.features]\na = a_mod:FEATURES\nz = z_mod:F\n"
                               "[dsv41_flags.features.extra]\nq = q:F\n")
    _dist(second, "bare-pkg", None)
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    for group in (ENTRY_POINT_GROUP, "dsv41_flags.features.extra", "dsv41_flags.engines",
                  "console_scripts"):
        assert installed_entry_points(group) == list(importlib.metadata.entry_points(group=group))
    names = [ep.name for ep in installed_entry_points(ENTRY_POINT_GROUP)]
    assert "hidden" not in names and "not_this" not in names
    assert {"a", "b", "z"} <= set(names)  # in the order of the directory listing, as the library


def test_scan_reads_a_broken_file_only_where_the_library_would(tmp_path, monkeypatch):
    """A shadowed distribution's unreadable entry_points.txt is ignored (the library never reads
    it); an unshadowed one fails the way the library fails."""
    import importlib.metadata

    from dsv41_flags.discovery import ENTRY_POINT_GROUP, installed_entry_points

    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "twice-pkg", "[dsv41_flags.features]\nok = ok_mod:FEATURE\n")
    _dist(second, "twice-pkg", None)
    (second / "twice_pkg-1.0.dist-info" / "entry_points.txt").write_bytes(b"[x]\n\xff\xfe = y\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    assert installed_entry_points(ENTRY_POINT_GROUP) == \
        list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    assert "ok" in [ep.name for ep in installed_entry_points(ENTRY_POINT_GROUP)]
    _dist(tmp_path / "third", "broken-pkg", None)
    (tmp_path / "third" / "broken_pkg-1.0.dist-info" / "entry_points.txt").write_bytes(b"\xff\xfe")
    monkeypatch.syspath_prepend(str(tmp_path / "third"))
    with pytest.raises(UnicodeDecodeError):
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    with pytest.raises(UnicodeDecodeError):
        installed_entry_points(ENTRY_POINT_GROUP)
