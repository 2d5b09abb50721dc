"""The rank consistency guard: a failed non-strict activation under the plugin still joins the
guard, and the guard mode is compared across ranks like any key, the strictest winning."""

import json

from ._child import events, run_py


def test_failed_non_strict_plugin_activation_still_joins_the_rank_guard(project):
    proc = run_py(project, """
        import json
        import dsv41_flags.rank_guard as g
        calls = []
        g.register_guard = lambda rt, reason="", engine=None: calls.append([rt, reason]) or True
        import dsv41_flags_plugin as _plugin
        _plugin.load()
        print(json.dumps(calls))
    """, DSV41_STRICT="0", DSV41_DEMO_PATCH_N="abc")
    assert proc.returncode == 0, proc.stderr
    [[rt, reason]] = json.loads(proc.stdout)
    assert rt is None and "SettingsError" in reason and "DEMO_PATCH_N" in reason
    assert "flags.error" in [e["event"] for e in events(proc.stderr)]


def test_guard_mode_is_compared_like_any_key_and_the_strictest_wins(make_runtime):
    """The logic (the engine tier runs it on 2 gloo ranks through sglang's own path): the
    mode is part of the view, a disagreement on it is a row of the table, and every rank acts on
    the strictest mode any rank holds."""
    from dsv41_flags.rank_guard import compare, effective_mode, rank_view

    on = make_runtime("[default]\nautotune_keep = true\nrank_guard = \"raise\"\n")
    off = make_runtime("[default]\nautotune_keep = true\nrank_guard = \"off\"\n")
    views = [rank_view(on), rank_view(off)]
    assert [v["rank_guard"] for v in views] == ["raise", "off"]
    assert compare(views) == [("rank_guard", {0: "raise", 1: "off"})]
    assert effective_mode(views) == "raise"
    assert effective_mode([rank_view(off), rank_view(off)]) == "off"
    assert compare([rank_view(off), rank_view(off)]) == []
    warn = make_runtime("[default]\nautotune_keep = false\n", env={"DSV41_RANK_GUARD": "warn"})
    assert effective_mode([rank_view(off), rank_view(warn)]) == "warn"
    assert [k for k, _ in compare([rank_view(on), rank_view(warn)])] == [
        "armed", "rank_guard", "AUTOTUNE_KEEP"]
    # a rank whose activation failed (non-strict, no runtime) still answers: a mismatch, and it
    # defers to the other ranks' mode
    from dsv41_flags.rank_guard import unavailable_view

    views = [rank_view(on), unavailable_view("SettingsError: bad value")]
    assert compare(views)[0] == ("armed", {0: ["autotune_keep"],
                                           1: "<not activated: SettingsError: bad value>"})
    assert effective_mode(views) == "raise"
