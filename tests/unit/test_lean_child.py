"""A feature file runs exactly as Python would run it: no compiler flags of the framework leak
into its code."""
from dsv41_flags.discovery import discover


def test_feature_code_does_not_inherit_the_framework_future_flags(tmp_path):
    (tmp_path / "feat.py").write_text(
        "from dsv41_flags import Feature\n"
        "def f(x: int) -> int: return x\n"
        "ANN = f.__annotations__\n"
        "assert ANN == {'x': int, 'return': int}, ANN  # not strings\n"
        "FEATURE = Feature(name='feat', target='json', install=lambda m, ctx: None, engine='', summary='s')\n")
    assert "feat" in [f.name for f in discover(tmp_path, entry_points=False)]
