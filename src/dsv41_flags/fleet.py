"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Fleet flags: a flag service (through OpenFeature: Unleash, a flagd file) drives the features of
a server (docs/fleet.md).

- **At boot** (``boot``): the launching process reads every feature's flag once, waiting at
  most ``boot_timeout_s``; a value becomes the flag's resolution, with the source ``fleet
  (unleash, flag dsv41.F, environment E)`` or ``fleet (flagd, flag dsv41.F, file P@sha256:..)``
  above every settings layer and variable. Every process gets it through the snapshot.
- **While serving** (``Watcher``): one thread per server, in the HTTP server process (never in
  a scheduler), reads the flags every ``poll_interval_s`` and turns each change of a live
  feature into one switch through the server's own live route (``switch``: every rank at one
  step, two phases, rollback). A change of a feature that is not live-safe is reported as
  ``restart needed``, never applied. Changes closer than ``min_switch_interval_s`` are coalesced.
  A service that cannot be read leaves every value as it is and says since when; it is probed
  again with a backoff.

The evaluation context (``targeting``) names the server: its targeting key (``instance_id``,
else ``<host>:<port>``), host, model, parallel sizes, engine and framework versions, profile,
fingerprint and the settings' labels.

Nothing here imports the OpenFeature SDK at module level: ``fleet_providers`` does, and only a
launch with a fleet table imports it.
"""
from __future__ import annotations

import enum
import math
import os
import re
import socket
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from dsv41_flags.declare import Feature
from dsv41_flags.errors import Problem
from dsv41_flags.files import FileRefused, read_regular
from dsv41_flags.fleet_settings import TOKEN_VAR, FleetSettings, from_wire
from dsv41_flags.resolution import Resolution, Resolved
from dsv41_flags.secrecy import MASK, masked_reason, masked_text
from dsv41_flags.status import FleetFeature, FleetStatus

#: the longest token file read (bytes)
MAX_TOKEN = 4096
#: the longest a server waits between two probes of a flag service that cannot be read (s)
MAX_BACKOFF_S = 30.0


class Answer(enum.StrEnum):
    """What the flag service answered for one flag."""

    VALUE = "value"              # a boolean
    MISSING = "missing"          # no such flag, or disabled there: the settings' value stands
    INVALID = "invalid"          # not a boolean, or its definition cannot be resolved: refused
    UNREACHABLE = "unreachable"  # the service could not be read


class Evaluation(NamedTuple):
    """One flag's answer: ``answer``, ``value`` (a bool for ``VALUE``, else None) and
    ``problem`` (why there is no value, in words)."""

    answer: Answer
    value: bool | None = None
    problem: str = ""


def now() -> str:
    """The time now, ISO 8601 in UTC to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def configured(resolution: Resolution) -> FleetSettings | None:
    """The launch's fleet settings, None when it has no fleet table."""
    table = resolution.reserved.get("FLEET") or {}
    return from_wire(table["settings"]) if table else None


#: what a token may be: one line of visible ASCII (an HTTP header value), at most MAX_TOKEN bytes
TOKEN_TEXT = re.compile(r"[\x21-\x7e]+")


def read_token(settings: FleetSettings, environ: Mapping[str, str]) -> tuple[str, str]:
    """``(token, problem)``: the flag service's token from ``DSV41_FLEET_TOKEN``, else from the
    regular file ``token_file`` (at most ``MAX_TOKEN`` bytes, read without blocking:
    ``files.read_regular``; surrounding space stripped), else ``""``. ``problem`` says why a
    named token file could not be read (a FIFO, a directory, missing, too large; never its
    content)."""
    if environ.get(TOKEN_VAR):
        token, where = environ[TOKEN_VAR].strip(), TOKEN_VAR
    elif not settings.token_file:
        return "", ""
    else:
        try:
            data = read_regular(settings.token_file, MAX_TOKEN)
        except FileRefused as exc:
            return "", f"fleet.token_file {exc}"
        token, where = data.decode("utf-8", "replace").strip(), f"fleet.token_file {settings.token_file}"
    if not token:
        return "", f"the token in {where} is empty"
    if not TOKEN_TEXT.fullmatch(token):
        # an HTTP header cannot carry it, and the library's error would quote it: never sent
        return "", (f"the token in {where} (not shown) is refused: it holds a space, a line "
                    f"break, a control or a non-ASCII character; accepted: one line of visible "
                    f"ASCII characters")
    return token, ""


def targeting(settings: FleetSettings, facts: Mapping[str, Any], *, profile: str = "",
              fingerprint: str = "") -> tuple[str, dict[str, Any]]:
    """``(targeting key, attributes)`` of this server's evaluation context.

    ``facts`` is the engine's view of the launch (``EngineAdapter.fleet_context``: ``host``,
    ``port``, ``model_path``, ``served_model_name``, ``tp_size``, ``dp_size``, ``pp_size``,
    ``engine_version``). The targeting key is ``instance_id`` when set, else ``<hostname>:<port>``
    (stable across restarts of the same server). Attributes: ``host`` (this machine's name), the
    facts, ``framework_version``, ``profile``, ``fingerprint`` (of the launch's settings, before
    fleet values) and every label; a label does not replace a fact of the same name."""
    from importlib.metadata import version

    host = socket.gethostname()
    key = settings.instance_id or f"{host}:{facts.get('port') or 0}"
    attributes: dict[str, Any] = {**settings.labels}
    attributes.update({k: v for k, v in facts.items() if v is not None and v != ""})
    attributes.update(host=host, instance_id=key, profile=profile, fingerprint=fingerprint,
                      framework_version=version("dsv41-flags"))
    return key, attributes


def evaluate(client, flag: str, default: bool, context) -> Evaluation:
    """One flag through the OpenFeature ``client`` (``get_boolean_details``) for ``context``.

    ``MISSING``: the service has no such flag (``FLAG_NOT_FOUND``) or holds it disabled (reason
    ``DISABLED``: flagd's ``state: DISABLED``; the value it gives is only the caller's default).
    ``INVALID``: a value that is not a boolean, or a definition the provider cannot resolve for
    this flag (``PARSE_ERROR``, ``GENERAL``, ``INVALID_CONTEXT``, ``TARGETING_KEY_MISSING``: a
    ``defaultVariant`` naming no variant, a ``$ref`` to nothing), the message naming the flag. ``UNREACHABLE``: the provider is not
    ready or failed (``PROVIDER_NOT_READY``, ``PROVIDER_FATAL``), or raised."""
    from openfeature.exception import ErrorCode
    from openfeature.flag_evaluation import Reason

    try:
        details = client.get_boolean_details(flag, default, context)
    except Exception as exc:  # a provider that raises past the SDK: the service's fault
        return Evaluation(Answer.UNREACHABLE, None, masked_reason(exc))
    code = details.error_code
    if code is None and details.reason == Reason.DISABLED:
        return Evaluation(Answer.MISSING, None, f"flag {flag} is disabled in the flag service")
    if code is None and isinstance(details.value, bool):
        return Evaluation(Answer.VALUE, details.value)
    message = masked_text(details.error_message or "")[:300]
    if code == ErrorCode.FLAG_NOT_FOUND:
        return Evaluation(Answer.MISSING, None, message or f"no flag {flag}")
    if code == ErrorCode.TYPE_MISMATCH or code is None:
        return Evaluation(Answer.INVALID, None,
                          f"flag {flag} is not a boolean{': ' + message if message else ''}")
    if code in (ErrorCode.PROVIDER_NOT_READY, ErrorCode.PROVIDER_FATAL):
        return Evaluation(Answer.UNREACHABLE, None,
                          f"{code.value}: {message}" if message else code.value)
    return Evaluation(Answer.INVALID, None, f"flag {flag} cannot be resolved ({code.value}"
                      f"{': ' + message if message else ''})")


def _yaml_hint(settings: FleetSettings, ev: Evaluation) -> str:
    """A hint for a YAML flagd file whose variant does not resolve: YAML 1.1 reads an unquoted
    ``on``/``off``/``yes``/``no`` as a boolean, so ``variants: {on: true}`` names no variant
    ``on``."""
    if settings.provider == "flagd" and settings.path.endswith((".yaml", ".yml")) and \
            "variant" in ev.problem:
        return " (in YAML, quote the variant names: 'on': true, 'off': false; unquoted they are booleans)"
    return ""


def origin(settings: FleetSettings, flag: str, digest: str = "") -> str:
    """The source of a value read from the flag service (the resolution's wording):
    ``fleet (unleash, flag F, environment E)`` or ``fleet (flagd, flag F, file P@sha256:..)``
    (``digest``: of the version the provider read, ``FlagFileCopy.digest``)."""
    if settings.provider == "flagd":
        return f"fleet (flagd, flag {flag}, file {settings.path}@{digest[:19]})"
    env = f", environment {settings.environment}" if settings.environment else ""
    return f"fleet (unleash, flag {flag}{env})"


class Connection(NamedTuple):
    """An open flag service: the OpenFeature ``client``, the ``provider`` (both None when none
    was opened), the evaluation ``context``, ``problem`` (why it is not ready; ``""`` when it
    is) and, for flagd, the ``flag_file`` copy the provider reads (``FlagFileCopy``)."""

    client: Any
    provider: Any
    context: Any
    problem: str
    flag_file: Any = None
    token: str = ""
    domain: str = ""

    def __repr__(self) -> str:  # never the token
        return f"Connection(provider={type(self.provider).__name__}, problem={self.problem!r})"

    def scrub(self, text: str) -> str:
        """``text`` with the token, wherever a library's message quoted it, as ``***``."""
        return text.replace(self.token, MASK) if self.token and text else text


def connect(settings: FleetSettings, key: str, attributes: Mapping[str, Any],
            environ: Mapping[str, str], timeout_s: float, flag_file: Any = None) -> Connection:
    """Open the flag service ``settings`` names, waiting at most ``timeout_s`` for it. For
    flagd, ``flag_file`` is the copy the provider reads (``fleet_providers.FlagFileCopy``, the
    caller's to close); while it holds no accepted version yet, the operator's file is read
    into it first, and a file that cannot be read or is refused opens no provider (client and
    provider None, the problem says why). Close it with ``disconnect(connection)``."""
    from openfeature.evaluation_context import EvaluationContext

    import dsv41_flags.fleet_providers as providers

    context = EvaluationContext(targeting_key=key, attributes=dict(attributes))
    # flagd takes no token; for Unleash a problem is said and the service still asked
    token, problem = read_token(settings, environ) if settings.provider == "unleash" else ("", "")
    if settings.provider == "flagd":
        if flag_file is None:
            raise ValueError("connect: a flagd fleet needs its FlagFileCopy")
        if not flag_file.digest:
            _, unreadable, refused = flag_file.refresh()
            if unreadable or refused:
                return Connection(None, None, context, unreadable or refused, flag_file)
    source = providers.provider(settings, token, flag_file)
    domain = providers.new_domain()
    client, not_ready = providers.register(source, timeout_s, domain)
    connection = Connection(client, source, context, problem or not_ready, flag_file, token,
                            domain)
    return connection._replace(problem=connection.scrub(connection.problem))


def disconnect(connection: Connection | None = None) -> None:
    """Stop the open flag service's provider (``connection``'s; None: whichever is open) and its
    threads."""
    import dsv41_flags.fleet_providers as providers

    if connection is None:
        providers.unregister()
    elif connection.provider is not None:
        providers.unregister(connection.domain)


def flag_file_for(settings: FleetSettings) -> Any:
    """The ``FlagFileCopy`` a flagd fleet's provider reads (None for another provider)."""
    if settings.provider != "flagd":
        return None
    from dsv41_flags.fleet_providers import FlagFileCopy

    return FlagFileCopy(settings.path)


def boot(resolution: Resolution, features: Sequence[Feature], facts: Mapping[str, Any],
         environ: Mapping[str, str], fingerprint: str = "") -> Resolution:
    """``resolution`` with every feature's flag read once from the flag service (the module
    docstring); unchanged without a fleet table. A flag the service gives as a boolean replaces
    the resolved value (source ``origin``, added last to its chain); a missing flag leaves it.

    Problems added: the service could not be read within ``boot_timeout_s`` (an error when
    ``required`` and strict: the launch stops; else a warning: the settings' values are used), a
    flag of the wrong type (a warning, or an error in strict mode). The reserved ``FLEET`` table
    keeps the evaluation context (``context``) so every process of the launch targets the same
    server."""
    settings = configured(resolution)
    if settings is None:
        return resolution
    key, attributes = targeting(settings, facts, profile=resolution.profile,
                                fingerprint=fingerprint)
    problems = list(resolution.problems)
    values = dict(resolution.values)
    strict = resolution.strict
    from dsv41_flags.fleet_providers import refusal, unreachable

    # a flagd file that is not a regular file (a FIFO would block a read), too large or with
    # a YAML alias is said at once, and no provider is opened (connect)
    flag_file = flag_file_for(settings)
    connection = connect(settings, key, attributes, environ, settings.boot_timeout_s, flag_file)
    try:
        down = connection.scrub(connection.problem or unreachable(connection.provider, settings)
                                or refusal(connection.provider) or "")
        read = 0
        if not down:
            for feature in features:
                flag = settings.flag(feature.name)
                known = values.get(feature.flag)
                current = bool(known.value) if known is not None else feature.default
                ev = evaluate(connection.client, flag, current, connection.context)
                ev = ev._replace(problem=connection.scrub(ev.problem))
                if ev.answer == Answer.UNREACHABLE:
                    down = ev.problem
                    break
                if ev.answer == Answer.INVALID:
                    outcome = ("refused; in strict mode a flag the service cannot give is an "
                               "error: the launch stops" if strict else
                               "refused, the settings' value stands")
                    problems.append(Problem(feature.flag, f"fleet flag {flag}", (
                        f"{settings.where()}: {ev.problem}; {outcome}; accepted: a boolean flag "
                        f"whose definition resolves{_yaml_hint(settings, ev)}"),
                        "error" if strict else "warning"))
                elif ev.answer == Answer.VALUE and known is not None:
                    read += 1
                    source = origin(settings, flag, getattr(connection.flag_file, "digest", ""))
                    values[feature.flag] = known._replace(
                        value=ev.value, source=source, chain=known.chain + ((source, ev.value),))
        if down:
            fatal = settings.required and strict
            problems.append(Problem("FLEET", settings.where(), (
                f"the flag service ({settings.where()}) could not be read at boot: {down}; "
                + ("fleet.required = true in strict mode: the launch stops"
                   if fatal else "the settings' values are used")),
                "error" if fatal else "warning"))
    finally:
        try:
            disconnect(connection)
        finally:
            if flag_file is not None:
                flag_file.close()
    table = dict(resolution.reserved["FLEET"])
    table["context"] = {"targeting_key": key, "attributes": _plain(attributes)}
    reserved = {**resolution.reserved, "FLEET": table}
    return resolution._replace(values=values, problems=tuple(problems), reserved=reserved)


def _plain(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` with every value text, a number or a bool (what an evaluation context and
    the snapshot carry)."""
    return {str(k): v if isinstance(v, (str, int, float, bool)) else str(v)
            for k, v in attributes.items()}


# ------------------------------------------------------------------ while serving
class Outcome(NamedTuple):
    """What one switch through the server's live route gave: ``ok``; ``applied``: the value now
    in effect; ``reason``: the refusal (``""`` when applied)."""

    ok: bool
    applied: bool | None
    reason: str = ""


#: the reason of a row whose flag the service holds no value for (missing, or disabled in
#: flagd): nothing is switched, and the value in effect stays until a launch reads the settings
NO_VALUE = ("no value in the flag service (the flag is missing or disabled): the value in "
            "effect stays; the next launch takes the settings' value")
#: how a row's reason starts when the fleet's answer or its switch was refused: such a row
#: never agrees, whatever the values (the server does not run what the service asked)
REFUSED = "refused: "


def agrees(fleet_value: bool | None, applied: bool | None, reason: str = "") -> bool:
    """Whether a server runs what the flag service asks of it for one feature: the service has
    no value for it, or its value is the one in effect, and nothing of it was refused
    (``reason`` starting with ``REFUSED``: a flag that is not a boolean, a refused switch)."""
    return (fleet_value is None or fleet_value == applied) and not reason.startswith(REFUSED)


class Watcher:
    """The flag service's thread of one server (the module docstring).

    ``features``: name -> Feature (every feature of the launch); ``launch_values``: name -> the
    value the launch started with; ``switch(name, value, requested_by) -> Outcome``: a switch
    through the server's own live route (the engine's; it blocks until every process answered);
    ``log``: the runtime's logger (events ``fleet.connected``, ``fleet.change``,
    ``fleet.switched``, ``fleet.refused``, ``fleet.restart_needed``, ``fleet.unreachable``,
    ``fleet.reachable``); ``on_change``: called with the ``FleetStatus`` after each change of it
    (metrics). Threads never outlive ``stop`` and never run in a forked child (a thread is not
    copied by ``fork``, and ``start`` refuses in a process other than the one that built it)."""

    def __init__(self, settings: FleetSettings, context: Mapping[str, Any],
                 features: Mapping[str, Feature], launch_values: Mapping[str, bool],
                 switch: Callable[[str, bool, str], Outcome], log, *,
                 environ: Mapping[str, str] | None = None,
                 on_change: Callable[[FleetStatus], None] | None = None) -> None:
        self.settings = settings
        self.key = str(context.get("targeting_key") or settings.instance_id or "")
        self.attributes = dict(context.get("attributes") or {})
        self.features = dict(features)
        self.switch = switch
        self.log = log
        self.environ = dict(os.environ if environ is None else environ)
        self.on_change = on_change
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows = {name: FleetFeature(feature=name, flag=settings.flag(name), live=f.live,
                                         applied=bool(launch_values.get(name, f.default)))
                      for name, f in self.features.items()}
        self._last_switch: dict[str, float] = {}
        self._interval: dict[str, float] = {}  # a refused feature's wait before the next try (s)
        self._status = FleetStatus(provider=settings.provider, where=settings.where(),
                                   instance_id=self.key)

    # -- the record
    def status(self) -> FleetStatus:
        """The server's fleet record now (``status.FleetStatus``)."""
        with self._lock:
            return self._status.replace(features=tuple(self._rows.values()))

    def _update(self, **fields: Any) -> None:
        with self._lock:
            self._status = self._status.replace(**fields)

    def _row(self, name: str, **fields: Any) -> FleetFeature:
        with self._lock:
            row = self._rows[name].replace(**fields)
            row = row.replace(agrees=agrees(row.fleet_value, row.applied, row.reason))
            self._rows[name] = row
            return row

    def _count(self, field: str) -> None:
        with self._lock:
            self._status = self._status.replace(**{field: getattr(self._status, field) + 1})

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change(self.status())
            except Exception as exc:  # a metrics failure never stops the watcher
                self.log.warning("fleet.metrics_failed", error=masked_reason(exc, 200))

    # -- the thread
    def start(self) -> None:
        """Start the thread (once). Raises RuntimeError in a process other than the builder's."""
        if os.getpid() != self.pid:
            raise RuntimeError("a fleet watcher runs only in the process that built it")
        with self._lock:   # callers on several threads start one thread
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dsv41-fleet",
                                                daemon=True)
                self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and the provider, waiting at most ``timeout_s``."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def wake(self, *_args: Any) -> None:
        """Read the flags now (the provider said its flags changed)."""
        self._wake.set()

    def _run(self) -> None:
        connection = None
        backoff = self.settings.poll_interval_s
        self._flag_file = flag_file_for(self.settings)
        try:
            while not self._stop.is_set():
                if connection is None or connection.provider is None:
                    # a flagd file never accepted yet opens no provider: tried again each read
                    connection = connect(self.settings, self.key, self.attributes, self.environ,
                                         max(self.settings.boot_timeout_s, 1.0), self._flag_file)
                    if connection.provider is not None:
                        if self._flag_file is not None:   # its init read the copy, whole
                            self._loaded = self._flag_file.digest
                        self._listen(connection)
                        self.log.info("fleet.connected", where=self.settings.where(),
                                      instance_id=self.key, problem=connection.problem or None)
                self._due = float("inf")
                try:
                    ok = self._read(connection)
                except Exception as exc:  # one read's failure is said; the next read tries again
                    self.log.error("fleet.failed", error=connection.scrub(masked_reason(exc)),
                                   what="this read of the flag service; the values stay")
                    self._unreachable(connection.scrub(masked_reason(exc)))
                    ok = False
                backoff = self.settings.poll_interval_s if ok else min(
                    MAX_BACKOFF_S, max(backoff * 2, self.settings.poll_interval_s))
                # a change held back by min_switch_interval_s is read again when it may switch
                self._wake.wait(min(backoff, max(0.0, self._due - time.monotonic())))
                self._wake.clear()
        except Exception as exc:  # the watcher's own failure: said, the server goes on serving
            self._update(reachable=False, problem=masked_reason(exc),
                         unreachable_since=self._status.unreachable_since or now())
            self.log.error("fleet.failed", error=masked_reason(exc))
            self._changed()
        finally:
            try:
                if connection is not None:
                    disconnect(connection)
            except Exception:
                pass
            finally:
                if self._flag_file is not None:
                    self._flag_file.close()

    def _listen(self, connection: Connection) -> None:
        """Wake on the provider's events: its flags changed, it is ready again, or it refused
        what it read (``PROVIDER_ERROR``: a flag file that does not parse, say; its message is
        reported by the next read)."""
        from openfeature.event import ProviderEvent

        for event in (ProviderEvent.PROVIDER_CONFIGURATION_CHANGED, ProviderEvent.PROVIDER_READY):
            connection.client.add_handler(event, self._on_accepted)
        connection.client.add_handler(ProviderEvent.PROVIDER_ERROR, self._on_error)

    def _on_error(self, details: Any) -> None:
        self._refusal_new = str(getattr(details, "message", None) or "the provider reported "
                                "an error")[:300]
        self._wake.set()

    def _on_accepted(self, *_args: Any) -> None:
        self._refusal_new = ""
        self._refusal = ""
        if self._flag_file is not None:
            self._loaded = self._flag_file.digest
        self._wake.set()

    _flag_file: Any = None  # flagd: the copy its provider reads (fleet_providers.FlagFileCopy)
    _loaded = ""        # flagd: the digest of the version its provider read last
    _refusal_new = ""   # the provider's last refusal, not reported yet
    _refusal = ""       # the refusal in force (until the provider accepts new definitions)
    _due = float("inf")  # when a coalesced change may be switched (time.monotonic())

    def _read(self, connection: Connection) -> bool:
        """Read every flag once and act on the changes; False when the service could not be read."""
        from dsv41_flags.fleet_providers import refusal, unreachable

        refused_file, self._refusal_new = self._refusal_new, ""
        copy = connection.flag_file
        if copy is not None:   # flagd: the operator's file read into the provider's copy
            if connection.provider is not None:
                copy.refresh()
            if copy.unreadable:
                self._unreachable(connection.scrub(copy.unreadable))
                return False
            refused_file = copy.refused or refused_file   # said once; the previous flags stay
            if connection.provider is None:   # refused before any version was accepted
                self._refuse_file(refused_file)
                self._update(reachable=True, unreachable_since="", last_read=now(),
                             problem=f"refused: {self._refusal}")
                self._changed()
                return True
        down = unreachable(connection.provider, self.settings) or (
            "" if connection.provider is not None else connection.problem)
        held = refusal(connection.provider)   # a provider that says it without an event
        if held == "":
            self._refusal = ""
        refused_file = refused_file or held or ""
        if down:  # the provider's error then says the same (flagd: no file): unreachable only
            self._unreachable(connection.scrub(down))
            return False
        refused_file = self._refuse_file(connection.scrub(refused_file))
        evaluations = {}
        for name in self.features:
            row = self._rows[name]
            default = row.fleet_value if row.fleet_value is not None else bool(row.applied)
            ev = evaluate(connection.client, row.flag, default, connection.context)
            ev = ev._replace(problem=connection.scrub(ev.problem))
            if ev.answer == Answer.UNREACHABLE:
                self._unreachable(ev.problem)
                return False
            evaluations[name] = ev
        if not self._status.reachable:
            self.log.info("fleet.reachable", where=self.settings.where(),
                          since=self._status.unreachable_since or None)
        self._update(reachable=True, unreachable_since="", last_read=now(),
                     problem=f"refused: {self._refusal}" if self._refusal else "")
        changed = False
        for name, ev in evaluations.items():
            changed |= self._act(name, ev)
        if changed or refused_file:
            self._changed()
        return True

    def _refuse_file(self, refused: str) -> str:
        """Say and count a refusal of the flag service's definitions once (``refused``: why;
        ``""``: none); returns ``refused`` when it is new, else ``""``."""
        if refused and refused != self._refusal:
            self._refusal = refused
            self._count("refused")
            self.log.warning("fleet.refused", where=self.settings.where(), reason=refused,
                             what="the flag service's definitions; every value stays")
            return refused
        return ""

    def _unreachable(self, problem: str) -> None:
        if self._status.reachable or not self._status.unreachable_since:
            self.log.warning("fleet.unreachable", where=self.settings.where(), problem=problem,
                             what="every value stays as it is")
            self._update(reachable=False, unreachable_since=now(), problem=problem[:300])
            for name in self.features:
                if self._rows[name].fleet_value is not None:
                    self._row(name, reason=f"flag service unreachable since "
                                           f"{self._status.unreachable_since}")
            self._changed()

    def _act(self, name: str, ev: Evaluation) -> bool:
        """Act on one flag's answer; True when its row changed."""
        row = self._rows[name]
        if ev.answer == Answer.INVALID:
            problem = (REFUSED + ev.problem + _yaml_hint(self.settings, ev))[:300]
            if row.reason != problem:
                self._count("refused")
                self.log.warning("fleet.refused", feature=name, flag=row.flag, reason=problem)
                self._row(name, reason=problem)
                return True
            return False
        if ev.answer == Answer.MISSING:
            if row.fleet_value is not None or row.reason not in ("", NO_VALUE):
                if row.fleet_value is not None:
                    self.log.info("fleet.change", feature=name, flag=row.flag, value=None,
                                  applied=row.applied, reason=NO_VALUE)
                self._row(name, fleet_value=None, reason=NO_VALUE, changed_at=now())
                return True
            return False
        value = bool(ev.value)
        changed = value != row.fleet_value
        if changed:
            row = self._row(name, fleet_value=value, changed_at=now())
            self.log.info("fleet.change", feature=name, flag=row.flag, value=value,
                          applied=row.applied)
        if value == row.applied:
            if row.reason:
                self._row(name, reason="")
                return True
            return changed
        feature = self.features[name]
        if not feature.live:
            reason = "restart needed: not live-safe, the value applies at the next launch"
            if row.reason != reason:
                self.log.warning("fleet.restart_needed", feature=name, flag=row.flag,
                                 fleet_value=value, applied=row.applied)
                self._row(name, reason=reason)
            return True
        last = self._last_switch.get(name)
        due = (last if last is not None else -math.inf) + self._interval.get(
            name, self.settings.min_switch_interval_s)
        if time.monotonic() < due:
            if changed:  # a change held back: counted once, however often it is read again
                self._count("coalesced")
            self._due = min(self._due, due)  # read again when the interval has passed
            return changed
        self._last_switch[name] = time.monotonic()
        requested_by = self.requested_by(row.flag)
        try:
            outcome = self.switch(name, value, requested_by)
        except Exception as exc:  # the route could not be asked: said, retried next read
            outcome = Outcome(False, row.applied, masked_reason(exc))
        if outcome.ok:
            self._interval.pop(name, None)
            self._count("switches")
            self._row(name, applied=value if outcome.applied is None else outcome.applied, reason="")
            self.log.info("fleet.switched", feature=name, flag=row.flag, value=value,
                          requested_by=requested_by)
        else:
            # tried again later, each time twice as late (up to MAX_BACKOFF_S); the same refusal
            # of the same value is reported and counted once
            self._interval[name] = min(MAX_BACKOFF_S, max(
                1.0, self.settings.min_switch_interval_s, 2 * self._interval.get(name, 0.5)))
            reason = f"{REFUSED}{outcome.reason}"[:300]
            if reason != row.reason or changed:
                self._count("refused")
                self.log.warning("fleet.refused", feature=name, flag=row.flag, value=value,
                                 reason=outcome.reason[:300],
                                 retry_in_s=self._interval[name])
            self._row(name, reason=reason,
                      applied=row.applied if outcome.applied is None else outcome.applied)
        return True

    def requested_by(self, flag: str) -> str:
        """Who a fleet switch names: ``unleash:<flag>@<environment>`` (Unleash's client API
        does not say who changed a flag; its event log does) or ``flagd:<file>@sha256:<hex>``."""
        if self.settings.provider == "flagd":
            return f"flagd:{self.settings.path}@{self._loaded or 'sha256:unknown'}"[:256]
        return f"unleash:{flag}@{self.settings.environment or 'default'}"[:256]
