"""Errors and records cross a process boundary: what a spawned worker raises or returns is pickled
to its parent and comes back equal."""



def test_errors_and_records_survive_pickling_as_multiprocessing_sends_them():
    """Records are frozen models and errors carry them. What a spawned worker raises or returns is
    pickled to its parent: every error class and a FeatureStatus come back equal, of their own type
    (never an unpickling AttributeError)."""
    import pickle

    from dsv41_flags import (ActivationError, DeclarationError, DriftError, FeatureStatus, SettingsError,
                             SnapshotError)
    from dsv41_flags.errors import Problem
    from dsv41_flags.live import SwitchError

    problems = [Problem("FOLDED_FENCE", "env DSV41_FOLDED_FENCE", "bad value 'maybe'", "error")]
    err = pickle.loads(pickle.dumps(SettingsError(problems)))
    assert type(err) is SettingsError and err.problems == problems and str(err) == str(SettingsError(problems))
    for exc in (SnapshotError("s"), DeclarationError("d"), DriftError("x"), ActivationError("a"), SwitchError("w")):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc)
    st = FeatureStatus(name="f", state="installed", value=True, source="declared default", target="t",
                       patches=("A.b",))
    assert pickle.loads(pickle.dumps(st)) == st
