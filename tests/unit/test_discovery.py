"""Feature discovery (``discovery.py``): a feature file runs exactly as Python would run it (no
compiler flags of the framework leak into its code), a file that is not a regular file or exits is
a DeclarationError, declarations are copied never mutated, and ``after=`` is ordered through
graphlib: unknown names, itself and cycles refused, a typo gets a suggestion."""
import dataclasses
import os
import sys
import textwrap

import pytest

from dsv41_flags import DeclarationError, Feature
from dsv41_flags.discovery import discover, install_order

from ._bounded import no_block
from ._child import REPO, parent


def test_feature_code_does_not_inherit_the_framework_future_flags(tmp_path):
    (tmp_path / "feat.py").write_text(
        "from dsv41_flags import Feature\n"
        "def f(x: int) -> int: return x\n"
        "ANN = f.__annotations__\n"
        "assert ANN == {'x': int, 'return': int}, ANN  # not strings\n"
        "FEATURE = Feature(name='feat', target='json', install=lambda m, ctx: None, engine='', summary='s')\n")
    assert "feat" in [f.name for f in discover(tmp_path, entry_points=False)]


def test_fifo_feature_file_is_a_declaration_error_not_a_hang(project):
    from dsv41_flags import DeclarationError

    os.mkfifo(project.feats / "zz.py")
    with pytest.raises(DeclarationError, match=r"zz.py is a FIFO, not a regular file"):
        no_block(parent, project)


def test_feature_file_symlink_is_refused(project, tmp_path):
    from dsv41_flags import DeclarationError

    other = tmp_path / "elsewhere.py"
    other.write_text((project.feats / "demo_patch.py").read_text())
    (project.feats / "demo_patch.py").unlink()
    (project.feats / "demo_patch.py").symlink_to(other)
    with pytest.raises(DeclarationError, match="symbolic link, which is not followed"):
        parent(project)


def _f(name, after=(), source=""):
    return Feature(name=name, target="json", install=print, summary="s", engine="", after=after,
                   source=source)


def test_after_order_through_graphlib_keeps_given_order_among_free_features():
    order = [f.name for f in install_order([_f("a", ("z",)), _f("b"), _f("z")])]
    assert order.index("z") < order.index("a") and order[0] == "b"
    assert [f.name for f in install_order([_f("a"), _f("b"), _f("c")])] == ["a", "b", "c"]


def test_after_cycle_names_the_cycle():
    with pytest.raises(DeclarationError, match=r"'after' forms a cycle: (a -> b -> c -> a|b -> c -> a -> b"
                                               r"|c -> a -> b -> c)"):
        install_order([_f("a", ("b",)), _f("b", ("c",)), _f("c", ("a",))])


def test_after_cycle_refused_at_discovery(tmp_path):
    for name, dep in (("one", "two"), ("two", "one")):
        (tmp_path / f"{name}.py").write_text(
            "from dsv41_flags import Feature\nFEATURE = Feature(name=%r, target='json', install=print, "
            "summary='s', engine='', after=(%r,))\n" % (name, dep))
    with pytest.raises(DeclarationError, match=r"\.py\): 'after' forms a cycle: (one -> two -> one|"
                                               r"two -> one -> two)"):
        discover(tmp_path, entry_points=False)


def test_after_typo_suggests_the_feature(tmp_path):
    (tmp_path / "me.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature(name='me', "
                                    "target='json', install=print, summary='s', engine='', "
                                    "after=('local_fenc',))\n")
    (tmp_path / "local_fence.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature("
                                             "name='local_fence', target='json', install=print, "
                                             "summary='s', engine='')\n")
    with pytest.raises(DeclarationError, match="did you mean local_fence"):
        discover(tmp_path, entry_points=False)


def test_declarations_are_never_mutated():
    """No ``object.__setattr__`` anywhere in the package: copies are made with dataclasses.replace."""
    src = REPO / "src" / "dsv41_flags"
    assert [p.name for p in src.rglob("*.py") if "object.__setattr__" in p.read_text()] == []
    f = _f("a")
    g = dataclasses.replace(f, source="/x.py")
    assert f.source == "" and g.source == "/x.py" and g == f


def test_discovery_copies_instead_of_mutating(tmp_path):
    (tmp_path / "shared.py").write_text(textwrap.dedent("""
        from dsv41_flags import Feature
        FEATURE = Feature(name="shared", target="json", install=print, summary="s", engine="")
    """))
    found = {f.name: f for f in discover(tmp_path, entry_points=False)}["shared"]
    module = sys.modules["dsv41_flags_features.shared"]
    assert found.source.endswith("shared.py") and module.FEATURE.source == ""


def test_feature_module_exiting_is_a_declaration_error(tmp_path):
    (tmp_path / "bad.py").write_text("import sys\nsys.exit(4)\n")
    with pytest.raises(DeclarationError, match="bad.py.*SystemExit"):
        discover(tmp_path, entry_points=False)


@pytest.mark.parametrize("after,needle", [("'nope'", "no known feature"), ("'me'", "itself")])
def test_after_must_name_another_known_feature(tmp_path, after, needle):
    (tmp_path / "me.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature(name='me', "
                                    f"target='json', install=print, summary='s', after=({after},))\n")
    with pytest.raises(DeclarationError, match=needle):
        discover(tmp_path, entry_points=False)


def test_after_cycle_is_a_declaration_error(tmp_path):
    for me, other in (("fa", "fb"), ("fb", "fa")):
        (tmp_path / f"{me}.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature("
                                           f"name='{me}', target='json', install=print, summary='s', "
                                           f"after=('{other}',))\n")
    with pytest.raises(DeclarationError, match="forms a cycle: fa -> fb -> fa"):
        discover(tmp_path, entry_points=False)
