"""What keeps ``dsv41-flags status`` fast (issue 11, bench row 1d), each with the behaviour it must
keep: plain parameters coerced without pydantic exactly as typer coerces them; the static drift
check kept in the cache and never stale, never in the way (corrupt, read-only, full, foreign);
the engine version looked up once."""
import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings as hsettings, strategies as st

import typer.main
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from dsv41_flags import Feature
from dsv41_flags import _static_cache as sc
from dsv41_flags._cli import _PlainValues, _plain_kind, app
from dsv41_flags._drift import _installed_version, engine_version
from dsv41_flags._static import check_feature

from ..conftest import REPO_SETTINGS


# ------------------------------------------------------------------ typer without pydantic
def _plain_params():
    group = typer.main.get_command(app)
    out = []
    for cmd in [group] + list(group.commands.values()):
        ctx = cmd.context_class(cmd, info_name=cmd.name)
        for param in cmd.get_params(ctx):
            if _plain_kind(param):
                out.append((cmd, ctx, param))
    return out


PLAIN = _plain_params()


def test_every_plain_parameter_has_the_pydantic_free_coercion():
    kinds = {(cmd.name, p.name): _plain_kind(p) for cmd, _, p in PLAIN}
    assert kinds[("status", "settings")] == "path-list" and kinds[("status", "profile")] == "str"
    assert kinds[("fingerprint", "write")] == "path" and kinds[("check", "engine")] == "str-list"
    assert kinds[("status", "help")] == "bool"
    assert all(isinstance(p._runtime_param, _PlainValues) for _, _, p in PLAIN)


def _outcome(runtime, value, param, ctx):
    try:
        got = runtime.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return ("error", exc.format_message())
    except Exception as exc:  # noqa: BLE001 - typer's own failure (a NUL byte): the same one
        return ("raised", type(exc).__name__, str(exc))
    return (type(got).__name__, [type(x).__name__ for x in got] if isinstance(got, list) else None,
            got)


EDGE = ["", "x", "-", ".", "~/x", "a//b/", " spaced ", "ü", "\udcff", "\x00", "settings.toml",
        "/etc/passwd", "/nonexistent/dir/file"]


@pytest.mark.parametrize("value", EDGE + [None, True, False, b"bytes", ("a", "b"), ()])
def test_plain_coercion_is_typers_for_edge_values(value):
    for cmd, ctx, param in PLAIN:
        mine = _outcome(param._runtime_param, value, param, ctx)
        typers = _outcome(build_runtime_param(param.type_descriptor), value, param, ctx)
        assert mine == typers, (cmd.name, param.name, value)


@hsettings(max_examples=40, deadline=None)
@given(st.one_of(st.text(), st.lists(st.text(), max_size=3).map(tuple)))
def test_plain_coercion_is_typers_for_any_text(value):
    for cmd, ctx, param in PLAIN:
        assert _outcome(param._runtime_param, value, param, ctx) == \
            _outcome(build_runtime_param(param.type_descriptor), value, param, ctx)


PROBE = """
import json, sys
from dsv41_flags._cli import app
try:
    app(["status", "--json", "-s", sys.argv[1]])
except SystemExit:
    pass
mods = [m for m in sys.modules if m.split(".")[0] in ("pydantic", "dsv41_flags", "sglang", "torch")]
sys.stderr.write("MODULES " + json.dumps(sorted(mods)) + "\\n")
"""


def _status_modules(tmp_path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), DSV41_FOLDED_FENCE="1", DSV41_AUTOTUNE_KEEP="1")
    proc = subprocess.run([sys.executable, "-c", PROBE, str(REPO_SETTINGS)], env=env,
                          capture_output=True, text=True, timeout=120)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES "))
    return json.loads(line.removeprefix("MODULES "))


def test_status_imports_no_pydantic_no_engine_and_no_checker_once_kept(tmp_path):
    first = _status_modules(tmp_path)
    assert not [m for m in first if m.split(".")[0] in ("pydantic", "sglang", "torch")]
    assert "dsv41_flags._static" in first          # nothing kept yet: the check ran
    assert list((tmp_path / "cache" / "dsv41-flags" / "static").glob("*.json"))
    again = _status_modules(tmp_path)
    assert "dsv41_flags._static" not in again      # answered from the cache
    assert not [m for m in again if m.split(".")[0] in ("pydantic", "sglang", "torch")]


# ------------------------------------------------------------------ the static check's cache
@pytest.fixture
def engine(tmp_path, monkeypatch):
    """A tiny installed package ``spdemo`` (on sys.path) with a target module, a feature on it,
    and a private cache directory. ``engine.check()`` -> (verdicts, source, ran: bool)."""
    root = tmp_path / "site"
    pkg = root / "spdemo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "target.py").write_text("class Worker:\n    def forward(self, x, *, scale=1): ...\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    class Engine:
        dir = pkg
        feature = Feature(name="spdemo_fix", target="spdemo.target", install=lambda m, c: None,
                          summary="s", engine="", requires=("Worker.forward(scale)", "Worker.step"))
        runs = 0

        def check(self, feature=None):
            real, ran = sc._check, []

            def counting(f):
                ran.append(f)
                return real(f)
            monkeypatch.setattr(sc, "_check", counting)
            try:
                verdicts, source = sc.installed_check(feature or self.feature)
            finally:
                monkeypatch.setattr(sc, "_check", real)
            return verdicts, source, bool(ran)

        def entries(self):
            return sorted(sc.static_dir().glob("*.json"))
    return Engine()


def _states(verdicts):
    return [v["verdict"] for v in verdicts]


def test_kept_answer_is_the_checkers_answer(engine):
    fresh = check_feature(engine.feature)
    verdicts, source, ran = engine.check()
    assert ran and verdicts == [v.to_dict() for v in fresh.verdicts] and source == fresh.source
    assert len(engine.entries()) == 1
    again, source2, ran2 = engine.check()
    assert not ran2 and again == verdicts and source2 == source
    assert _states(again) == ["ok", "missing"]


def test_an_edit_of_the_same_size_and_time_is_seen(engine):
    target = engine.dir / "target.py"
    assert _states(engine.check()[0]) == ["ok", "missing"]
    before = target.stat()
    text = target.read_text().replace("def forward", "def forwarx")  # same size
    target.write_text(text)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))     # same mtime
    assert target.stat().st_size == before.st_size
    verdicts, _, ran = engine.check()
    assert ran and _states(verdicts) == ["missing", "missing"]
    assert _states(engine.check()[0]) == ["missing", "missing"]


def test_a_module_that_appears_or_moves_is_seen(engine):
    f = Feature(name="spdemo_sub", target="spdemo.sub.deep", install=lambda m, c: None,
                summary="s", engine="", requires=("Thing",))
    verdicts, source, _ = engine.check(f)
    assert source is None and _states(verdicts) == ["missing"]
    (engine.dir / "sub").mkdir()
    (engine.dir / "sub" / "__init__.py").write_text("")
    (engine.dir / "sub" / "deep.py").write_text("Thing = 1\n")
    verdicts, source, ran = engine.check(f)
    assert ran and source.endswith("deep.py") and _states(verdicts) == ["ok"]
    (engine.dir / "sub" / "deep.py").rename(engine.dir / "sub" / "deep_old")
    (engine.dir / "sub" / "deep").mkdir()
    (engine.dir / "sub" / "deep" / "__init__.py").write_text("Other = 1\n")
    verdicts, source, ran = engine.check(f)
    assert ran and source.endswith("__init__.py") and _states(verdicts) == ["missing"]


def test_other_requires_or_target_are_other_questions(engine):
    engine.check()
    other = Feature(name="spdemo_fix", target="spdemo.target", install=lambda m, c: None,
                    summary="s", engine="", requires=("Worker.step",))
    verdicts, _, ran = engine.check(other)
    assert ran and _states(verdicts) == ["missing"] and len(engine.entries()) == 2


def test_a_new_checker_asks_afresh_and_replaces_the_entry(engine, monkeypatch):
    engine.check()
    [entry] = engine.entries()
    real = sc._question
    monkeypatch.setattr(sc, "_question", lambda f: dict(real(f), checker="0" * 64))
    _, _, ran = engine.check()
    assert ran and engine.entries() == [entry]     # the same file, not one more
    assert json.loads(entry.read_text())["question"]["checker"] == "0" * 64
    assert not engine.check()[2]


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b'{"question": 1}', b"\xff\xfe",
                                     b'{"question": null, "finds": {}, "files": {}, "answer": {}}'])
def test_corrupt_entry_is_checked_afresh_and_replaced(engine, garbage):
    verdicts, _, _ = engine.check()
    [entry] = engine.entries()
    entry.write_bytes(garbage)
    again, _, ran = engine.check()
    assert ran and again == verdicts
    assert json.loads(entry.read_bytes())["answer"]["verdicts"] == verdicts   # replaced whole


def test_entry_with_a_forged_answer_for_another_question_is_not_used(engine):
    verdicts, _, _ = engine.check()
    [entry] = engine.entries()
    data = json.loads(entry.read_text())
    data["question"]["requires"] = ["Worker.other"]
    data["answer"]["verdicts"] = [dict(v, verdict="ok") for v in verdicts]
    entry.write_text(json.dumps(data))
    again, _, ran = engine.check()
    assert ran and again == verdicts


def test_entry_that_is_a_symlink_or_another_users_is_not_trusted(engine, tmp_path):
    verdicts, _, _ = engine.check()
    [entry] = engine.entries()
    forged = json.loads(entry.read_text())
    forged["answer"]["verdicts"] = [dict(v, verdict="ok") for v in verdicts]
    elsewhere = tmp_path / "forged.json"
    elsewhere.write_text(json.dumps(forged))
    entry.unlink()
    entry.symlink_to(elsewhere)
    again, _, ran = engine.check()
    assert ran and again == verdicts
    if os.getuid() == 0:   # as root: a file owned by someone else is not ours
        entry.unlink()
        entry.write_text(json.dumps(forged))
        os.chown(entry, 4242, -1)
        again, _, ran = engine.check()
        assert ran and again == verdicts


@pytest.mark.parametrize("how", ["not-a-directory", "read-only"])
def test_unwritable_cache_gives_the_answer_without_a_trace(engine, tmp_path, monkeypatch, how):
    if how == "not-a-directory":
        blocker = tmp_path / "blocker"
        blocker.write_text("a file where the cache directory would be")
        monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "sub"))
    else:
        cache = tmp_path / "ro"
        (cache / "dsv41-flags" / "static").mkdir(parents=True)
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
        real = os.replace

        def refuse(*a, **k):
            raise PermissionError(errno.EROFS, "Read-only file system")
        monkeypatch.setattr(sc.os, "replace", refuse)
    verdicts, _, ran = engine.check()
    assert ran and _states(verdicts) == ["ok", "missing"]
    verdicts2, _, ran2 = engine.check()
    assert ran2 and verdicts2 == verdicts
    if how == "read-only":
        monkeypatch.setattr(sc.os, "replace", real)
        assert not list((tmp_path / "ro" / "dsv41-flags" / "static").iterdir())  # no temp left


def test_no_home_directory_means_no_cache(engine, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")

    def nowhere():
        raise RuntimeError("Could not determine home directory.")
    monkeypatch.setattr(sc.Path, "home", staticmethod(nowhere))
    verdicts, _, ran = engine.check()
    assert ran and _states(verdicts) == ["ok", "missing"]


def test_read_only_directory_on_disk(engine, tmp_path, monkeypatch):
    cache = tmp_path / "rodir"
    static = cache / "dsv41-flags" / "static"
    static.mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    static.chmod(0o500)
    try:
        verdicts, _, ran = engine.check()
        assert ran and _states(verdicts) == ["ok", "missing"]
        if os.getuid() != 0:   # root writes anyway; anyone else leaves the directory untouched
            assert not list(static.iterdir())
    finally:
        static.chmod(0o700)


def test_full_disk_leaves_no_partial_entry(engine, monkeypatch):
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(sc.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    verdicts, _, ran = engine.check()
    assert ran and _states(verdicts) == ["ok", "missing"]
    assert not list(sc.static_dir().iterdir())    # neither an entry nor a temporary file


def test_unparseable_source_answer_follows_the_fix(engine):
    (engine.dir / "target.py").write_bytes(b"class Worker(:\n")
    verdicts, _, ran = engine.check()
    assert ran and _states(verdicts) == ["undecided", "undecided"]
    (engine.dir / "target.py").write_text("class Worker:\n    def forward(self, scale): ...\n"
                                          "    def step(self): ...\n")
    verdicts, _, ran = engine.check()
    assert ran and _states(verdicts) == ["ok", "ok"]


def test_live_non_stdlib_module_answers_are_not_kept(engine):
    pytest.importorskip("typing_extensions")
    (engine.dir / "target.py").write_text(textwrap.dedent("""
        import typing_extensions
        class Worker(typing_extensions.Protocol):
            def forward(self, x, *, scale=1): ...
    """))
    _, _, ran = engine.check()
    assert ran and not engine.entries()
    _, _, ran = engine.check()
    assert ran


# ------------------------------------------------------------------ the engine version
def test_engine_version_is_looked_up_once_per_name_and_path(monkeypatch):
    import importlib.metadata

    calls = []
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda n: calls.append(n) or real(n))
    _installed_version.cache_clear()
    f = Feature(name="pk", target="json", install=lambda m, c: None, summary="s",
                engine="packaging>=1")
    first = engine_version(f)
    assert first == real("packaging") and engine_version(f) == first and calls == ["packaging"]
    monkeypatch.syspath_prepend("/nonexistent-dsv41-path")   # another import path: asked again
    assert engine_version(f) == first and calls == ["packaging", "packaging"]
    _installed_version.cache_clear()
