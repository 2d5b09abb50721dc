"""Live switches in one process: a live feature off at boot is installed bypassed and
switching it changes behaviour on the next call; a non-live feature is refused; events and
states report the live value and the generation."""
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dsv41_flags import DeclarationError, Feature
from dsv41_flags.live import (HISTORY_LIMIT, REQUESTED_BY_LIMIT, SWITCH_WORDS, NotLiveError, Switchboard,
                              SwitchError, parse_assignment, parse_value)


@pytest.fixture
def target(tmp_path, monkeypatch):
    """A real importable module and a features dir: ``fence`` (live) and ``boot_only`` (not)."""
    name = f"live_target_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        class Verify:
            def accept(self, x, *, folded=False):
                return [x]
            @classmethod
            def make(cls, n):
                return ["made", n]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    fdir = tmp_path / "feats"
    fdir.mkdir()
    (fdir / "fence.py").write_text(textwrap.dedent(f"""
        from dsv41_flags import Feature

        def install(module, ctx):
            def make(original):
                def accept(self, *args, **kwargs):
                    return ["fenced"] + original(self, *args, **kwargs)
                return accept
            ctx.patch(module.Verify, "accept", make)

            def make_cls(original):
                def make(cls, *args):
                    return ["fenced"] + original(cls, *args)
                return make
            ctx.patch(module.Verify, "make", make_cls)

        FEATURE = Feature(name="fence", target={name!r}, install=install, summary="live demo",
                          engine="", live=True)
    """))
    (fdir / "boot_only.py").write_text(textwrap.dedent(f"""
        from dsv41_flags import Feature

        def install(module, ctx):
            pass

        FEATURE = Feature(name="boot_only", target={name!r}, install=install, summary="boot",
                          engine="")
    """))
    yield type("T", (), {"name": name, "dir": fdir})
    sys.modules.pop(name, None)


def test_live_feature_off_at_boot_is_installed_bypassed_and_switches_on_the_next_call(target, make_runtime):
    rt = make_runtime("[default]\nfence = false\nboot_only = false\n", features_dir=target.dir)
    rt.arm()
    states = {s.name: s.state for s in rt.states()}
    assert (states["fence"], states["boot_only"]) == ("off", "off")
    mod = __import__(target.name)
    v = mod.Verify()
    st = {s.name: s for s in rt.states()}["fence"]
    assert st.state == "bypassed" and st.value is False and st.live is True
    assert st.patches == ("Verify.accept", "Verify.make")
    assert v.accept(1) == [1] and mod.Verify.make(2) == ["made", 2]   # bypassed: the original
    wrapper = mod.Verify.__dict__["accept"]

    with capture_logs() as logs:
        toggle = rt.switch("fence", "on", requested_by="alice")
    assert v.accept(1) == ["fenced", 1]                                # the very next call
    assert mod.Verify.make(2) == ["fenced", "made", 2]
    assert mod.Verify.__dict__["accept"] is wrapper                    # no re-patch
    assert (toggle.old, toggle.new, toggle.generation) == (False, True, 1)
    ev = [e for e in logs if e["event"] == "feature.toggled"]
    assert len(ev) == 1
    assert ev[0]["feature"] == "fence" and ev[0]["old"] is False and ev[0]["new"] is True
    assert ev[0]["generation"] == 1 and ev[0]["requested_by"] == "alice" and ev[0]["pid"] > 0
    st = {s.name: s for s in rt.states()}["fence"]
    assert st.state == "installed" and st.value is True
    assert st.source.startswith("live switch generation 1 by alice (boot: ")
    assert rt.report()["features"]["fence"]["value"] is True

    rt.switch("fence", False, requested_by="bob")
    assert v.accept(1) == [1]
    assert rt.live.generation == 2 and [t.new for t in rt.live.history] == [True, False]
    assert {s.name: s.state for s in rt.states()}["fence"] == "bypassed"
    rt.uninstall()
    assert "__wrapped__" not in vars(mod.Verify.__dict__["accept"])
    assert mod.Verify.__dict__["accept"].__qualname__ == "Verify.accept"


def test_live_feature_on_at_boot_then_switched_off(target, make_runtime):
    mod = __import__(target.name)
    rt = make_runtime("[default]\nfence = true\n", features_dir=target.dir)
    rt.arm()
    assert mod.Verify().accept(3) == ["fenced", 3]
    assert {s.name: s.state for s in rt.states()}["fence"] == "installed"
    rt.switch("fence", "off", requested_by="t")
    assert mod.Verify().accept(3) == [3]


def test_switch_before_the_target_is_imported_takes_effect_at_install(target, make_runtime):
    rt = make_runtime("[default]\nfence = false\n", features_dir=target.dir)
    rt.arm()
    rt.switch("fence", True, requested_by="t")
    assert {s.name: s.state for s in rt.states()}["fence"] == "armed"
    mod = __import__(target.name)
    assert mod.Verify().accept(1) == ["fenced", 1]
    assert {s.name: s.state for s in rt.states()}["fence"] == "installed"


def test_switching_a_feature_that_is_not_live_is_refused(target, make_runtime):
    rt = make_runtime("[default]\nboot_only = true\n", features_dir=target.dir)
    rt.arm()
    __import__(target.name)
    with pytest.raises(NotLiveError) as exc:
        rt.switch("boot_only", "off", requested_by="t")
    msg = str(exc.value)
    assert "'boot_only'" in msg and "not live-safe" in msg and "relaunch" in msg
    assert "DSV41_BOOT_ONLY=0" in msg
    assert rt.live.generation == 0 and not rt.live.history


def test_the_shipped_autotune_keep_is_refused_and_folded_fence_is_live(make_runtime):
    rt = make_runtime(env={"DSV41_AUTOTUNE_KEEP": "1"})
    assert rt.features["folded_fence"].live and not rt.features["autotune_keep"].live
    with pytest.raises(NotLiveError, match="'autotune_keep' is not live-safe"):
        rt.switch("autotune_keep", "off", requested_by="t")


@pytest.mark.parametrize("name,value,match", [
    ("nope", "on", r"no feature named 'nope'; known: autotune_keep, boot_only, fence, folded_fence \(live-safe: fence, folded_fence\)"),
    ("fence", "maybe", r"switch fence='maybe': the value is not one of"),
    ("fence", "", r"switch fence='': the value is not one of"),
    ("fence", 2, r"switch fence=2: the value is not one of"),
])
def test_bad_switches_name_the_feature_and_value(target, make_runtime, name, value, match):
    rt = make_runtime("[default]\n", features_dir=target.dir)
    rt.arm()
    with pytest.raises(SwitchError, match=match):
        rt.switch(name, value, requested_by="t")
    assert rt.live.generation == 0


def test_a_live_feature_whose_patch_is_not_in_place_cannot_be_switched(target, make_runtime):
    rt = make_runtime("[default]\nfence = true\n", features_dir=target.dir)
    rt.arm()
    __import__(target.name)
    rt.uninstall()
    with pytest.raises(SwitchError, match="'fence' is uninstalled in this process"):
        rt.switch("fence", False, requested_by="t")


def _live_fence(tmp_path, monkeypatch, prefix: str, target_src: str, install_body: str,
                more: str) -> tuple[str, object]:
    """A target module of a fresh name (``target_src``) on sys.path and a features dir with a live
    feature ``fence`` on it (install body ``install_body``, more Feature arguments ``more``)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(target_src)
    monkeypatch.syspath_prepend(str(tmp_path))
    fdir = tmp_path / "feats"
    fdir.mkdir()
    (fdir / "fence.py").write_text(
        "from dsv41_flags import Feature\n"
        f"def install(module, ctx):\n    {install_body}\n"
        f"FEATURE = Feature(name='fence', target={name!r}, install=install, summary='d', engine='',"
        f"{more} live=True)\n")
    return name, fdir


def test_a_live_feature_off_at_boot_that_drifts_does_not_stop_a_strict_process(tmp_path, monkeypatch, make_runtime):
    name, fdir = _live_fence(tmp_path, monkeypatch, "live_drift", "class Verify:\n    pass\n",
                             "pass", " requires=('Verify.accept',),")
    rt = make_runtime("[default]\nstrict = true\n", features_dir=fdir)
    rt.arm()
    with capture_logs() as logs:
        __import__(name)              # no DriftError: the flag is off
    sys.modules.pop(name, None)
    assert {s.name: s.state for s in rt.states()}["fence"] == "drifted"
    assert any(e["event"] == "feature.drifted" and e["strict"] is False for e in logs)
    with pytest.raises(SwitchError, match="'fence' is drifted in this process"):
        rt.switch("fence", True, requested_by="t")


def test_live_patch_of_a_non_callable_fails_the_install(tmp_path, monkeypatch, make_runtime):
    name, fdir = _live_fence(tmp_path, monkeypatch, "live_const", "LIMIT = 3\n",
                             "ctx.patch(module, 'LIMIT', lambda old: 5)", "")
    rt = make_runtime("[default]\nstrict = false\nfence = true\n", features_dir=fdir)
    rt.arm()
    mod = __import__(name)
    sys.modules.pop(name, None)
    st = {s.name: s for s in rt.states()}["fence"]
    assert st.state == "failed" and "may only patch functions and methods" in st.detail
    assert mod.LIMIT == 3


def test_live_must_be_a_bool():
    with pytest.raises(DeclarationError, match="live must be True or False"):
        Feature(name="x", target="m", install=lambda m, c: None, summary="s", live="yes")


@pytest.mark.parametrize("text,expected", [("folded_fence=on", ("folded_fence", "on")),
                                           ("DSV41_FOLDED_FENCE=0", ("folded_fence", "0")),
                                           ("FOLDED_FENCE = true", ("folded_fence", "true")),
                                           ("dsv41_Folded_Fence=off", ("folded_fence", "off"))])
def test_parse_assignment(text, expected):
    assert parse_assignment(text) == expected


@pytest.mark.parametrize("spelling", ["fence", "FENCE", "DSV41_FENCE", " dsv41_fence ", "Fence"])
def test_every_spelling_the_cli_and_http_accept_switches_in_process_too(target, make_runtime, spelling):
    rt = make_runtime("[default]\nfence = false\n", features_dir=target.dir)
    rt.arm()
    mod = __import__(target.name)
    toggle = rt.switch(spelling, "on", requested_by="t")
    assert toggle.feature == "fence" and toggle.changed and rt.live.last("fence") is toggle
    assert mod.Verify().accept(1) == ["fenced", 1]
    assert {s.name: s.state for s in rt.states()}["fence"] == "installed"
    assert parse_assignment(f"{spelling}=on")[0] == "fence"   # the CLI's and HTTP's rule


@pytest.mark.parametrize("value", ["maybe", "", "  ", "2", 2, None, "enable"])
def test_a_bad_switch_value_lists_exactly_the_words_a_switch_accepts(target, make_runtime, value):
    rt = make_runtime("[default]\n", features_dir=target.dir)
    rt.arm()
    with pytest.raises(SwitchError) as exc:
        rt.switch("fence", value, requested_by="t")
    with pytest.raises(SwitchError) as cli_exc:             # the CLI's check, before sending
        parse_value("fence", value)
    assert str(exc.value) == str(cli_exc.value)
    assert str(exc.value).endswith(f"the value is not {SWITCH_WORDS}") and "empty" not in str(exc.value)
    for word in ("on", "off", "true", "false", "yes", "no", "1", "0"):
        assert parse_value("fence", word.upper()) is (word in ("on", "true", "yes", "1"))
        assert word in SWITCH_WORDS


def test_the_cli_refuses_a_bad_value_with_the_same_words():
    cli = Path(sys.executable).with_name("dsv41-flags")
    proc = subprocess.run([str(cli), "set", "DSV41_FOLDED_FENCE=maybe", "--url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"switch folded_fence='maybe': the value is not {SWITCH_WORDS}" in " ".join(proc.stderr.split())


@pytest.mark.parametrize("boot,value", [("false", "off"), ("true", "on"), ("false", False), ("true", 1)])
def test_a_switch_to_the_current_value_is_a_no_op(target, make_runtime, boot, value):
    rt = make_runtime(f"[default]\nfence = {boot}\n", features_dir=target.dir)
    rt.arm()
    __import__(target.name)
    before = {s.name: s for s in rt.states()}["fence"]
    with capture_logs() as logs:
        toggle = rt.switch("fence", value, requested_by="t")
    assert toggle.changed is False and toggle.old == toggle.new == (boot == "true")
    assert toggle.generation == 0 == rt.live.generation and not rt.live.history
    assert toggle.to_dict()["changed"] is False
    assert [e["event"] for e in logs] == ["feature.toggle_unchanged"]
    assert {s.name: s for s in rt.states()}["fence"] == before
    rt.rollback(toggle, "another rank failed")               # nothing to undo
    assert rt.live.generation == 0 and {s.name: s for s in rt.states()}["fence"] == before


def test_concurrent_switches_get_each_generation_once_in_order(target, make_runtime):
    rt = make_runtime("[default]\nfence = false\n", features_dir=target.dir)
    rt.arm()
    __import__(target.name)
    toggles: list = []
    errors: list = []

    def switcher(k: int) -> None:
        try:
            for i in range(500):
                toggles.append(rt.switch("fence", (i + k) % 2 == 0, requested_by=f"t{k}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=switcher, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    applied = sorted((t for t in toggles if t.changed), key=lambda t: t.generation)
    assert len(toggles) == 2000 and applied
    assert [t.generation for t in applied] == list(range(1, len(applied) + 1))
    assert all(a.new == b.old for a, b in zip(applied, applied[1:])) and applied[0].old is False
    assert all(t.old == t.new for t in toggles if not t.changed)
    assert rt.live.generation == len(applied)
    assert list(rt.live.history) == applied[-HISTORY_LIMIT:]
    assert rt.live.dropped == max(0, len(applied) - HISTORY_LIMIT)
    assert rt.value(rt.features["fence"]) is applied[-1].new


def test_the_switch_history_keeps_the_last_entries_and_counts_the_dropped(target, make_runtime):
    rt = make_runtime("[default]\nfence = false\n", features_dir=target.dir)
    rt.arm()
    __import__(target.name)
    n = HISTORY_LIMIT + 44
    for i in range(n):
        rt.switch("fence", i % 2 == 0, requested_by=f"u{i}")
    assert len(rt.live.history) == HISTORY_LIMIT and rt.live.dropped == 44
    assert [t.generation for t in rt.live.history] == list(range(45, n + 1))
    assert rt.source(rt.features["fence"]).startswith(f"live switch generation {n} by u{n - 1} ")
    status = __import__("dsv41_flags.status", fromlist=["x"]).process_status(rt)
    assert len(status.switches) == HISTORY_LIMIT and status.switches_dropped == 44


def test_a_rollback_restores_generation_history_and_source_also_at_the_limit():
    board = Switchboard(limit=2)
    board.gate("f", False)
    first = board.apply("f", True, requested_by="a")
    second = board.apply("f", False, requested_by="b")
    third = board.apply("f", True, requested_by="c")
    assert list(board.history) == [second, third] and board.dropped == 1
    board.rollback(third)
    assert board.generation == 2 and list(board.history) == [second] and board.last("f") is second
    assert board.gates["f"].on is False and board.dropped == 1
    board.rollback(first)                                     # not the last applied: left alone
    assert board.generation == 2 and board.gates["f"].on is False
    with pytest.raises(SwitchError, match="generation 2 is not an integer above"):
        board.apply("f", True, requested_by="d", generation=2)
    assert board.apply("f", True, requested_by="d", generation=3).generation == 3


@pytest.mark.parametrize("requested_by,match", [
    (None, "requested_by must be text"), (5, "requested_by must be text, got int"),
    (b"alice", "requested_by must be text, got bytes"),
    ("x" * (REQUESTED_BY_LIMIT + 1), f"{REQUESTED_BY_LIMIT + 1} characters long; at most {REQUESTED_BY_LIMIT}"),
    ("x" * 50_000_000, f"at most {REQUESTED_BY_LIMIT} are accepted"),
], ids=["none", "int", "bytes", "one-too-long", "50-MB"])
def test_requested_by_is_short_text(target, make_runtime, requested_by, match):
    rt = make_runtime("[default]\n", features_dir=target.dir)
    rt.arm()
    with pytest.raises(SwitchError, match=match) as exc:
        rt.switch("fence", "on", requested_by=requested_by)
    assert len(str(exc.value)) < 300
    assert rt.live.generation == 0 and not rt.live.history
    assert rt.switch("fence", "on", requested_by="x" * REQUESTED_BY_LIMIT).generation == 1


def test_parse_assignment_without_equals_is_an_error():
    with pytest.raises(SwitchError, match="is not NAME=VALUE"):
        parse_assignment("folded_fence")


def test_a_value_that_cannot_be_shown_is_named_by_its_type():
    from dsv41_flags.live import _shown

    class BadRepr:
        def __repr__(self):
            raise RuntimeError("repr bomb")

    assert _shown(BadRepr()) == "<BadRepr object>"
    assert _shown(10 ** 5000) == "<int object>"


def test_a_live_gate_created_by_two_threads_at_once_is_one_gate(monkeypatch):
    """The switchboard's gates are created where first used (a target's install in one thread, a
    switch in another, not at arming): two gates for one feature would let the patch read one
    while the switch set the other, a switch that silently changed nothing."""
    import threading

    import dsv41_flags.live as _live

    both = threading.Barrier(2)

    class SlowGate(_live.Gate):
        __slots__ = ()

        def __init__(self, feature, on):
            super().__init__(feature, on)
            try:
                both.wait(timeout=2)  # both threads found no gate and are creating one
            except threading.BrokenBarrierError:
                pass

    monkeypatch.setattr(_live, "Gate", SlowGate)
    board = _live.Switchboard()
    got = []
    threads = [threading.Thread(target=lambda on=on: got.append(board.gate("f", on))) for on in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 2 and got[0] is got[1] is board.gates["f"]
