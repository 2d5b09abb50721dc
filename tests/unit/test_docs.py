"""The documentation: the README stays short, every relative link in it and in docs/ resolves,
MkDocs builds the site in strict mode, and the README's feature is a real one."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app

from ..conftest import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_BYTES = 10_500
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _markdown_files() -> list[Path]:
    return [README, REPO / "CHANGELOG.md", REPO / "bench" / "README.md", *sorted(DOCS.rglob("*.md"))]


def _slug(heading: str) -> str:
    """The anchor MkDocs' toc extension (and GitHub) gives a heading."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    body = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", body, re.M)}


def _links(path: Path) -> list[str]:
    body = FENCE.sub("", path.read_text(encoding="utf-8"))
    body = re.sub(r"`[^`\n]*`", "", body)
    return LINK.findall(body)


def test_readme_is_short():
    size = README.stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move detail into docs/"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path):
    if not path.exists():
        pytest.fail(f"{path.relative_to(REPO)} is missing")
    broken = []
    for target in _links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):      # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"{path.relative_to(REPO)}: " + "; ".join(broken)


def test_mkdocs_builds_strictly(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()


def readme_feature() -> tuple[str, str]:
    """(file name, source) of the feature file the README shows."""
    m = re.search(r"```python\n# features/(\w+\.py)\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert m, "the README shows no feature file (```python block starting '# features/NAME.py')"
    return m.group(1), m.group(2)


def test_readme_feature_passes_the_drift_check(tmp_path, monkeypatch):
    pytest.importorskip("sglang")
    name, source = readme_feature()
    (tmp_path / "features").mkdir()
    (tmp_path / "features" / name).write_text(source)
    settings = tmp_path / "settings.toml"
    settings.write_text(f"[default]\n{Path(name).stem} = true\n")
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    result = CliRunner().invoke(app, ["check", "--json", "-s", str(settings)])
    data = json.loads(result.stdout)
    rows = {row["feature"]: row for row in data["features"]}
    assert rows[Path(name).stem]["ok"], rows[Path(name).stem]


def test_the_architecture_page_names_modules_that_exist():
    """Every module or folder the architecture page names (``snapshot.py``, ``engines/sglang/``)
    is where it says: src/dsv41_flags/, else src/, else the repository."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`((?:[\w.]+/)*[\w.]*\w\.py|(?:[\w.]+/)+)`", text))
    assert {"snapshot.py", "state.py", "engines/sglang/facts.py", "cli/"} <= names
    missing = [n for n in sorted(names)
               if not any((base / n).exists() for base in (REPO / "src" / "dsv41_flags", REPO / "src", REPO))]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
