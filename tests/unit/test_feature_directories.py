"""Feature directories add to each other: the shipped features, one local directory (``features/``
beside one's own settings, or named by ``features_dir``) and the installed entry points are
loaded side by side; a feature declared by two sources is refused, naming both."""
import json

import pytest

from dsv41_flags import DeclarationError
from dsv41_flags.discovery import SHIPPED_FEATURES, discover
from dsv41_flags.assembly import build

LOCAL_FEATURE = """from dsv41_flags import Feature

FEATURE = Feature(name={name!r}, target="json", install=lambda module, ctx: None,
                  summary="a local hot fix", engine="")
"""


def _local(root, file="my_fix.py", name="my_fix", directory="features"):
    fdir = root / directory
    fdir.mkdir(exist_ok=True)
    (fdir / file).write_text(LOCAL_FEATURE.format(name=name))
    return fdir


def _build(settings, environ=None):
    return build([settings], None, environ=dict(environ or {}), argv=[], use_snapshot=False,
                 configure_logging=False)


@pytest.mark.parametrize("named_by", ["beside the settings", "features_dir", "DSV41_FEATURES_DIR"])
def test_local_features_add_to_the_shipped_ones(tmp_path, named_by):
    directory = "features" if named_by == "beside the settings" else "hotfixes"
    fdir = _local(tmp_path, directory=directory)
    settings = tmp_path / "settings.toml"
    text = "[default]\nfolded_fence = true\nmy_fix = true\n"
    if named_by == "features_dir":
        text += 'features_dir = "hotfixes"\n'
    settings.write_text(text)
    rt = _build(settings, {"DSV41_FEATURES_DIR": str(fdir)} if named_by == "DSV41_FEATURES_DIR" else {})
    assert set(rt.features) == {"autotune_keep", "folded_fence", "my_fix"}
    assert not rt.resolution.problems  # "key 'folded_fence' matches no flag" no more
    assert rt.value(rt.features["folded_fence"]) is True and rt.value(rt.features["my_fix"]) is True
    assert rt.features["folded_fence"].source == str(SHIPPED_FEATURES / "folded_fence.py")
    assert rt.features["my_fix"].source == str((fdir / "my_fix.py").resolve())


def test_a_child_from_the_snapshot_has_both_the_shipped_and_the_local_features(tmp_path):
    _local(tmp_path)
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\nmy_fix = true\n")
    parent = _build(settings)
    files = [name for name, _ in json.loads(parent.snapshot())["feature_files"]]
    assert str(SHIPPED_FEATURES / "folded_fence.py") in files
    assert str((tmp_path / "features" / "my_fix.py").resolve()) in files
    child = build(None, None, environ={"DSV41_SNAPSHOT": parent.snapshot()}, argv=[],
                  configure_logging=False)
    assert child.from_snapshot and set(child.features) == set(parent.features)
    assert child.value(child.features["my_fix"]) is True


@pytest.mark.parametrize("file", ["my_fence.py", "folded_fence.py"])
def test_a_feature_name_of_the_shipped_ones_is_refused_naming_both_sources(tmp_path, file):
    fdir = _local(tmp_path, file=file, name="folded_fence")
    with pytest.raises(DeclarationError) as exc:
        discover(fdir, entry_points=False)
    message = str(exc.value)
    assert str(SHIPPED_FEATURES / "folded_fence.py") in message
    assert str(fdir / file) in message or str((fdir / file).resolve()) in message


def test_a_feature_name_of_an_installed_entry_point_is_refused_naming_both(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "their_feature.py").write_text(LOCAL_FEATURE.format(name="my_fix"))
    info = site / "their_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: their-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[dsv41_flags.features]\nmy_fix = their_feature:FEATURE\n")
    monkeypatch.syspath_prepend(str(site))
    fdir = _local(tmp_path)
    with pytest.raises(DeclarationError) as exc:
        discover(fdir)
    message = str(exc.value)
    assert "entry point my_fix = their_feature:FEATURE" in message
    assert str((fdir / "my_fix.py").resolve()) in message


def test_the_shipped_directory_named_as_local_adds_nothing_twice():
    names = [f.name for f in discover(SHIPPED_FEATURES, entry_points=False)]
    assert names == sorted(set(names)) and {"autotune_keep", "folded_fence"} <= set(names)
