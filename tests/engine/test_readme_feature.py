"""Engine tier: the feature file and the test the README shows, run as written against the real
sglang 0.5.23 (the README's example is a real feature, not a sketch)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.unit.test_docs import readme_feature

pytestmark = pytest.mark.engine


def readme_test() -> str:
    """The README's pytest function that uses the ``dsv41_flags_runtime`` fixture."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r"```python\n(def test_\w+\(dsv41_flags_runtime\):\n.*?)```", text, re.S)
    assert m, "the README shows no test using dsv41_flags_runtime"
    return m.group(1)


def test_the_readme_feature_installs_and_its_test_passes(dsv41_flags_runtime, tmp_path, monkeypatch):
    name, source = readme_feature()
    (tmp_path / "features").mkdir()
    (tmp_path / "features" / name).write_text(source)
    monkeypatch.chdir(tmp_path)                  # the README's test names features_dir="features"
    namespace: dict = {}
    exec(compile(readme_test(), "README.md", "exec"), namespace)
    test = next(v for k, v in namespace.items() if k.startswith("test_"))
    test(dsv41_flags_runtime)                    # asserts the state is 'installed'

    kit = dsv41_flags_runtime
    feature = Path(name).stem
    import sglang.srt.managers.scheduler as scheduler
    (installed,) = [e for e in kit.events("feature.installed") if e["feature"] == feature]
    assert installed["patches"] == ["Scheduler.get_new_batch_prefill"]
    assert scheduler.Scheduler.get_new_batch_prefill.__name__ == "get_new_batch_prefill"
    assert kit.events("flags.resolved")[0]["features"][feature]["options"]["limit"]["value"] == 32
