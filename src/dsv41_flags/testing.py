"""Test kit for feature authors: a pytest plugin (entry point group ``pytest11``, loaded by pytest
once the package is installed) with the fixture ``dsv41_flags_runtime``.

Like ``structlog.testing.capture_logs`` and OpenTelemetry's instrumentation test base, it runs
the real thing in-process and puts everything back afterwards::

    def test_my_fix(dsv41_flags_runtime):
        kit = dsv41_flags_runtime
        rt = kit.activate({"my_fix": True}, {"my_fix": {"limit": 16}}, features_dir="features")
        import my_engine_module                      # the target: the patch installs here
        assert kit.state("my_fix") == State.INSTALLED      # from dsv41_flags import State
        assert kit.events("feature.installed")[0]["feature"] == "my_fix"

``activate`` goes through ``dsv41_flags.activate()`` exactly as a process does: flag and option
values are handed over as ``DSV41_*`` variables (their text cast by the same rules as in a
launch), the features are discovered from ``features_dir``, ``flags.resolved`` is emitted and the
armed features are hooked. At teardown every patch is uninstalled (hooks of targets never
imported are disarmed), ``os.environ``, structlog's configuration, the process runtime with every
attribute its own patches hold (a test inside an active process, e.g. under ``dsv41-flags run --
pytest``, leaves the process's patches on) and the feature modules in ``sys.modules`` are
restored.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

import pytest
import structlog
from structlog.testing import LogCapture

import dsv41_flags
import dsv41_flags.activation as _activation
from dsv41_flags.discovery import PACKAGE
from dsv41_flags.errors import RestoreError
from dsv41_flags.names import ENV_PREFIX
from dsv41_flags.runtime import Runtime
from dsv41_flags.status import FeatureStatus

__all__ = ["FlagsKit", "dsv41_flags_runtime"]


def _text(value: Any) -> str:
    """A Python value as the variable text a launch script would write."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


class FlagsKit:
    """One in-process activation for a test, and everything needed to put the process back.

    Build it through the ``dsv41_flags_runtime`` fixture. ``runtime`` is the activated Runtime
    (None before ``activate``); ``captured`` is the list of every event dict logged since
    ``activate`` (structlog's ``LogCapture``: keys ``event``, ``log_level`` and the event's fields).
    """

    def __init__(self, tmp_path: Path):
        self._tmp = tmp_path
        self._capture = LogCapture()
        self.runtime: Runtime | None = None
        self._saved: dict[str, Any] | None = None

    @property
    def captured(self) -> list[dict]:
        """Every event dict captured since ``activate``."""
        return self._capture.entries

    def activate(self, flags: Mapping[str, Any] | None = None,
                 options: Mapping[str, Mapping[str, Any]] | None = None, *,
                 features_dir: str | os.PathLike | None = None, settings: str | None = None,
                 profile: str | None = None, strict: bool = True,
                 env: Mapping[str, str] | None = None) -> Runtime:
        """Activate the framework in this process and return its runtime.

        flags: feature name -> on/off (bool or a flag word); options: feature name ->
        {option name -> value} (lists as Python lists); both become ``DSV41_<KEY>`` variables
        whose text is cast as in any launch. features_dir: directory of feature modules (default:
        the features shipped with the package). settings: TOML text of a settings file (default:
        an empty ``[default]`` section); profile: its profile. strict: strict mode. env: further
        variables to set. Every other ``DSV41_*`` variable of the test process is unset meanwhile.
        Raises what ``dsv41_flags.activate`` raises (SettingsError, DeclarationError, DriftError);
        a strict drift or failed install at a LATER import raises DriftError from that import
        (where a launch emits ``flags.error`` and stops the process with exit status 3);
        the process is restored at teardown in every case. One activation per test.
        """
        if self._saved is not None:
            raise RuntimeError("dsv41_flags_runtime: activate() was already called in this test "
                               "(one activation per process, as in a launch)")
        self._save()
        for name in [k for k in os.environ if k.upper().startswith(ENV_PREFIX)]:
            del os.environ[name]
        variables = {f"{ENV_PREFIX}STRICT": _text(strict)}
        if features_dir is not None:
            variables[f"{ENV_PREFIX}FEATURES_DIR"] = str(Path(features_dir).resolve())
        for name, value in (flags or {}).items():
            variables[ENV_PREFIX + name.upper()] = _text(value)
        for name, values in (options or {}).items():
            for option, value in values.items():
                variables[f"{ENV_PREFIX}{name.upper()}_{option.upper()}"] = _text(value)
        variables.update(env or {})
        os.environ.update(variables)
        # a directory of its own: no features/ of the test's tmp_path is picked up by accident
        home = self._tmp / "dsv41_flags_kit"
        home.mkdir(exist_ok=True)
        path = home / "settings.toml"
        path.write_text(settings if settings is not None else "[default]\n", encoding="utf-8")
        # every level captured (a level filter left by an earlier configuration would hide events)
        structlog.configure(processors=[self._capture], cache_logger_on_first_use=False,
                            wrapper_class=structlog.make_filtering_bound_logger(0))
        _activation.set_process_state((None, None))
        # export=False: the kit's snapshot must not reach processes the test starts
        self.runtime = dsv41_flags.activate([path], profile, export=False)
        # in a test a strict failure at a later import raises DriftError from the import statement
        # (a launch would emit flags.error and stop with exit status 3: not the test runner)
        self.runtime.on_import_failure = None
        return self.runtime

    # ------------------------------------------------------------------ reading
    def events(self, name: str | None = None) -> list[dict]:
        """Captured events, only those named ``name`` when given."""
        return [e for e in self.captured if name is None or e.get("event") == name]

    def states(self) -> dict[str, FeatureStatus]:
        """Feature name -> FeatureStatus of the activated runtime."""
        return {s.name: s for s in self._need().states()}

    def state(self, name: str) -> str:
        """The state of feature ``name`` (off, armed, installed, drifted, failed, ...)."""
        return self.states()[name].state

    def _need(self) -> Runtime:
        if self.runtime is None:
            raise RuntimeError("dsv41_flags_runtime: call activate() first")
        return self.runtime

    # ------------------------------------------------------------------ restore
    def _save(self) -> None:
        process = _activation.process_state()[0]
        self._saved = {
            # (owner, attr, had its own attribute, value) of every patch of the process's runtime
            "patched": [(r.owner, r.attr, r.attr in getattr(r.owner, "__dict__", {}),
                         getattr(r.owner, "__dict__", {}).get(r.attr))
                        for r in (process.ledger.records() if process is not None else ())],
            "environ": dict(os.environ),
            "structlog": structlog.get_config(),
            "structlog_configured": structlog.is_configured(),
            "process_state": _activation.process_state(),
            "modules": {k for k in sys.modules if k == PACKAGE or k.startswith(PACKAGE + ".")},
        }

    def restore(self) -> None:
        """Uninstall every patch, then put back os.environ, structlog's configuration, the process
        runtime and the attributes its patches hold, and ``sys.modules``' feature modules as they
        were before ``activate``. Every step is done whatever the others do; RestoreError (raised
        at the end, the test's teardown then errors) lists each attribute whose owner refused the
        restore and that is still patched."""
        saved, self._saved = self._saved, None
        if saved is None:
            return
        # activate() may have raised after making its runtime the process's (strict drift at arm)
        current = _activation.process_state()[0]
        rt = self.runtime if self.runtime is not None else (
            current if current is not saved["process_state"][0] else None)
        failures: list[tuple[str, str, str]] = []
        try:
            if rt is not None:
                try:
                    rt.uninstall()  # also disarms hooks whose target was never imported
                except RestoreError as exc:
                    failures += exc.failures
        finally:
            os.environ.clear()
            os.environ.update(saved["environ"])
            if saved["structlog_configured"]:
                structlog.configure(**saved["structlog"])
            else:
                structlog.reset_defaults()
            _activation.set_process_state(saved["process_state"])
            for owner, attr, had_own, value in saved["patched"]:
                if had_own and getattr(owner, "__dict__", {}).get(attr) is not value:
                    try:
                        setattr(owner, attr, value)
                    except Exception as exc:  # noqa: BLE001 - listed below, the rest go on
                        failures.append(("(the process runtime's patch)",
                                         f"{getattr(owner, '__qualname__', owner)}.{attr}",
                                         f"{type(exc).__name__}: {exc}"))
            for name in [k for k in sys.modules if (k == PACKAGE or k.startswith(PACKAGE + "."))
                         and k not in saved["modules"]]:
                del sys.modules[name]
        if failures:
            raise RestoreError(failures)


@pytest.fixture
def dsv41_flags_runtime(tmp_path) -> FlagsKit:
    """A FlagsKit: ``kit.activate(flags, options, features_dir=...)`` activates dsv41_flags in
    this test's process; ``kit.events(name)``, ``kit.state(name)`` read what happened; every
    original is restored after the test."""
    kit = FlagsKit(tmp_path)
    yield kit
    kit.restore()
