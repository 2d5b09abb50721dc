"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The OpenFeature providers a fleet table names, and the one OpenFeature client of a process.
Imported only where a fleet table is set (``fleet``): it imports the OpenFeature SDK.

- ``flagd``: ``openfeature-provider-flagd``'s ``FlagdProvider`` with resolver ``FILE`` (flagd's
  file mode: the flag definition file is read in this process and watched for changes; no flagd
  server). A file that does not parse is refused by the provider (``PROVIDER_ERROR``) and the
  flags it held before stay.
- ``unleash``: ``UnleashClient`` (Unleash's own Python SDK) behind ``UnleashFleetProvider``, a
  small provider of ours. ``openfeature-provider-unleash`` 0.1.2 was tried and is not used: it
  cannot set the refresh interval (fixed at UnleashClient's 15 s, which a kill switch cannot
  wait for), the environment or a cache outside the user's home (UnleashClient's default file
  cache writes under ``~/.cache``), and it sends the context's attributes beside ``userId``
  instead of in ``properties``, where Unleash's constraints read custom fields (docs/fleet.md).

Every provider here is registered under the OpenFeature domain ``DOMAIN``, so an application's
own OpenFeature provider in the same process is left alone.
"""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from openfeature import api
from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import ErrorCode
from openfeature.flag_evaluation import FlagResolutionDetails, Reason
from openfeature.provider import AbstractProvider, Metadata
from openfeature.provider.no_op_provider import NoOpProvider
from UnleashClient.cache import BaseCache

from dsv41_flags.files import FileRefused, pid_alive, read_regular, write_atomic
from dsv41_flags.fleet_settings import FleetSettings
from dsv41_flags.secrecy import masked_reason, masked_text, masked_url

#: the providers' own loggers: what they log (a traceback of a flag file that does not parse, a
#: failed fetch) is reported by the watcher as an event (``fleet.refused``, ``fleet.unreachable``)
QUIET_LOGGERS = ("openfeature", "UnleashClient", "apscheduler")
for _name in QUIET_LOGGERS:
    logging.getLogger(_name).setLevel(logging.CRITICAL)
del _name
#: the OpenFeature domain of the framework's client (an application's default provider is apart)
DOMAIN = "dsv41_flags.fleet"
#: seconds one reachability probe of an Unleash server may take
PROBE_TIMEOUT_S = 2.0
#: the largest flagd file read for its digest (bytes); a larger one is refused
MAX_FLAG_FILE = 4 << 20
#: how often the flagd provider checks its private copy for a new version (milliseconds)
COPY_POLL_MS = 100
#: the largest answer of the Unleash server read (decoded bytes); a larger one is refused
MAX_UNLEASH_ANSWER = 4 << 20
#: the path of Unleash's client API that answers the flag definitions
FEATURES_PATH = "/client/features"


class AnswerTooLarge(ValueError):
    """An answer of the flag service over its cap: refused before it is read whole."""


def definitions_problem(body: bytes) -> str:
    """Why ``body`` is not Unleash's answer of flag definitions (a JSON object with a list
    ``features``; what UnleashClient then parses), ``""`` when it is one. UnleashClient keeps
    the flags it had when its parse fails, and says nothing a caller can read: this is what the
    watcher reports and counts instead."""
    import json

    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return f"its answer is not JSON ({type(exc).__name__}); the flags read before stay"
    if not isinstance(data, dict) or not isinstance(data.get("features"), list):
        return ("its answer is not Unleash's flag definitions (a JSON object with a features "
                "list); the flags read before stay")
    for i, entry in enumerate(data["features"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("enabled", False), bool)
                and isinstance(entry.get("strategies", []), list)):
            return (f"its flag definition {i} is not one (a name, a boolean enabled, a list of "
                    f"strategies); the flags read before stay")
    return ""


class CappedBody:
    """``requests.Response.raw`` (a urllib3 response, read by ``requests`` through ``stream``)
    cut off at ``limit`` decoded bytes, or ``deadline_s`` seconds after its first chunk (a body
    that trickles): past either the connection is closed, ``on_refused(text)`` is called and
    ``AnswerTooLarge`` raised; the whole body read calls ``on_read(body)`` (bytes, at
    most ``limit``). Everything else is the wrapped response's."""

    def __init__(self, raw: Any, limit: int, on_read, on_refused, deadline_s: float = 10.0) -> None:
        self._raw, self._limit, self._deadline_s = raw, limit, deadline_s
        self._on_read, self._on_refused = on_read, on_refused

    def stream(self, amt: int = 2 ** 16, decode_content: bool | None = None):
        seen, chunks = 0, []
        started = time.monotonic()
        for chunk in self._raw.stream(amt, decode_content=decode_content):
            seen += len(chunk)
            if time.monotonic() - started > self._deadline_s:   # a body that trickles
                self._raw.close()
                text = f"its answer took longer than {self._deadline_s:g} s to arrive: cut off"
                self._on_refused(text)
                raise AnswerTooLarge(text)
            if seen > self._limit:
                self._raw.close()
                text = f"its answer is larger than {self._limit >> 20} MiB"
                self._on_refused(text)
                raise AnswerTooLarge(text)
            chunks.append(chunk)
            yield chunk
        self._on_read(b"".join(chunks))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class MemoryCache(BaseCache):
    """UnleashClient's cache kept in this process's memory: nothing is written to disk, so no test and no server writes in the user's home."""

    bootstrapped = False

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self._lock = threading.Lock()

    def set(self, key: str, value: Any) -> None:
        with self._lock:
            self._data[key] = value

    def mset(self, data: dict) -> None:
        with self._lock:
            self._data.update(data)

    def get(self, key: str, default: Optional[Any] = None) -> Any:
        with self._lock:
            return self._data.get(key, default)

    def exists(self, key: str) -> bool:
        with self._lock:
            return key in self._data

    def destroy(self) -> None:
        with self._lock:
            self._data.clear()


class UnleashFleetProvider(AbstractProvider):
    """Boolean flags of an Unleash server through ``UnleashClient``.

    The evaluation context goes to Unleash as ``userId`` (the targeting key, which gradual
    rollouts stick to by default), ``environment`` and ``appName`` from the settings, and every
    attribute as text in ``properties`` (where constraints on custom context fields read). A flag
    the server does not know resolves with ``FLAG_NOT_FOUND``; before the first fetch every flag
    resolves with ``PROVIDER_NOT_READY``. ``unreachable()`` probes the server's ``/health``."""

    def __init__(self, settings: FleetSettings, token: str) -> None:
        from UnleashClient import UnleashClient

        self.settings = settings
        self.base = settings.url.rstrip("/")
        self.refresh_interval = max(1, round(settings.poll_interval_s))
        self.request_timeout = max(1, round(min(settings.boot_timeout_s or 5, 10)))
        self.client = UnleashClient(
            url=self.base, app_name=settings.app_name,
            environment=settings.environment or "default",
            instance_id=settings.instance_id or "dsv41-flags",
            refresh_interval=self.refresh_interval,
            metrics_interval=60, disable_metrics=True,
            custom_headers={"Authorization": token} if token else {},
            request_timeout=self.request_timeout,
            request_retries=0, cache=MemoryCache(), verbose_log_level=10,
            # requests' public streaming and response hooks: an answer is read through
            # CappedBody, never whole past MAX_UNLEASH_ANSWER
            custom_options={"stream": True, "hooks": {"response": [self._capped]}})
        self._refusal = ""
        self._denied = ""
        self._probe: threading.Thread | None = None
        self._answered: float | None = None   # time.monotonic() of the last features answer

    def _capped(self, response: Any, *_args: Any, **_kwargs: Any) -> Any:
        """requests' response hook: refuse an answer whose ``Content-Length`` is over
        ``MAX_UNLEASH_ANSWER`` at once, and read any other through ``CappedBody``. Only the
        flag definitions' answer (``FEATURES_PATH``) moves ``refusal()``."""
        features = FEATURES_PATH in (response.url or "")
        if features:
            self._answered = time.monotonic()
        if features and response.status_code in (401, 403):
            self._denied = (f"it answered {response.status_code} to the token: "
                            "DSV41_FLEET_TOKEN or fleet.token_file is missing, wrong, or a token "
                            "of another environment or project")
        elif features and response.status_code == 404:
            self._denied = (f"{masked_url(self.base)}{FEATURES_PATH} answered 404: is fleet.url "
                            "Unleash's client API (http://HOST:4242/api)?")
        elif features and response.status_code in (200, 304):
            self._denied = ""
        elif features:   # a server error, or an answer Unleash does not give
            self._denied = f"it answered {response.status_code} to the flag definitions"

        def read(body: bytes) -> None:
            if features and response.status_code == 200:
                self._refusal = definitions_problem(body)

        def refused(text: str) -> None:
            if features:
                self._refusal = text
        length = response.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > MAX_UNLEASH_ANSWER:
            response.close()
            text = f"its answer is larger than {MAX_UNLEASH_ANSWER >> 20} MiB ({int(length)} bytes)"
            refused(text)
            raise AnswerTooLarge(text)
        response.raw = CappedBody(response.raw, MAX_UNLEASH_ANSWER, read, refused,
                                  deadline_s=2.0 * self.request_timeout)
        return response

    def refusal(self) -> str:
        """Why the server's last answer of flag definitions was refused (too large: the flags
        read before it stay), ``""`` when it was taken."""
        return self._refusal

    def get_metadata(self) -> Metadata:
        return Metadata(name="dsv41_flags unleash")

    def initialize(self, evaluation_context: EvaluationContext | None = None) -> None:
        self.client.initialize_client(fetch_toggles=True)

    def shutdown(self) -> None:
        if self.client.is_initialized:
            self.client.destroy()

    def unreachable(self) -> str:
        """Why the server cannot be read now: it refused the token at the last read of the flag
        definitions (401 or 403), or ``GET <url>/../health`` does not answer 200 within
        ``PROBE_TIMEOUT_S``; ``""`` when it can."""
        if self._denied:
            return self._denied
        down = self._health()
        if down:
            return down
        # the server is up, yet UnleashClient retries nothing and raises on a 5xx (its Retry),
        # so such an answer never reaches the response hook: flag definitions missing for two
        # polls say it
        stale = 2 * self.refresh_interval + self.request_timeout + 1
        if self._answered is None and self.client.is_initialized:
            return ("its /health answers, but it gave no answer of flag definitions (a server "
                    "error or a timeout at /client/features)")
        if self._answered is not None and time.monotonic() - self._answered > stale:
            return (f"its /health answers, but it has given no answer of flag definitions for "
                    f"{stale:g} s (a server error or a timeout at /client/features)")
        return ""

    def _health(self) -> str:
        """Why ``GET <url>/../health`` does not answer 200 within ``PROBE_TIMEOUT_S`` (one
        deadline for the whole probe), ``""`` when it does."""
        root = self.base[:-4] if self.base.endswith("/api") else self.base
        shown = f"{masked_url(root)}/health"
        if self._probe is not None and self._probe.is_alive():
            return f"{shown} has not answered the previous probe yet"
        outcome: dict[str, str] = {}

        def probe() -> None:
            try:
                with urllib.request.urlopen(root + "/health", timeout=PROBE_TIMEOUT_S) as reply:
                    reply.read(1024)
                    outcome["why"] = "" if reply.status == 200 else \
                        f"{shown} answered {reply.status}"
            except urllib.error.HTTPError as exc:
                outcome["why"] = f"{shown} answered {exc.code}"
            except Exception as exc:  # URLError, timeout, reset: the service is not reachable
                outcome["why"] = masked_text(
                    f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")[:200]

        # one deadline for the whole probe (a server that trickles its answer a byte at a time
        # defeats a per-read timeout): the probe runs in a daemon thread joined with it, and
        # one still waiting is not doubled
        self._probe = threading.Thread(target=probe, name="dsv41-fleet-probe", daemon=True)
        self._probe.start()
        self._probe.join(PROBE_TIMEOUT_S)
        if "why" not in outcome:
            return f"{shown} did not answer within {PROBE_TIMEOUT_S:g} s"
        return outcome["why"]

    def _context(self, context: EvaluationContext | None) -> dict:
        out: dict[str, Any] = {"environment": self.settings.environment or "default",
                               "appName": self.settings.app_name}
        if context is not None:
            if context.targeting_key:
                out["userId"] = context.targeting_key
            out["properties"] = {k: str(v) for k, v in context.attributes.items()}
        return out

    def resolve_boolean_details(self, flag_key: str, default_value: bool,
                                evaluation_context: EvaluationContext | None = None
                                ) -> FlagResolutionDetails[bool]:
        if not self.client.is_initialized:
            return FlagResolutionDetails(default_value, reason=Reason.ERROR,
                                         error_code=ErrorCode.PROVIDER_NOT_READY)
        if flag_key not in self.client.feature_definitions():
            return FlagResolutionDetails(default_value, reason=Reason.ERROR,
                                         error_code=ErrorCode.FLAG_NOT_FOUND,
                                         error_message=f"no flag {flag_key} in Unleash")
        enabled = self.client.is_enabled(flag_key, self._context(evaluation_context))
        return FlagResolutionDetails(bool(enabled), reason=Reason.TARGETING_MATCH)

    def _wrong_type(self, flag_key: str, default_value: Any) -> FlagResolutionDetails:
        return FlagResolutionDetails(default_value, reason=Reason.ERROR,
                                     error_code=ErrorCode.TYPE_MISMATCH,
                                     error_message=f"{flag_key}: Unleash flags are boolean here")

    def resolve_string_details(self, flag_key, default_value, evaluation_context=None):
        return self._wrong_type(flag_key, default_value)

    def resolve_integer_details(self, flag_key, default_value, evaluation_context=None):
        return self._wrong_type(flag_key, default_value)

    def resolve_float_details(self, flag_key, default_value, evaluation_context=None):
        return self._wrong_type(flag_key, default_value)

    def resolve_object_details(self, flag_key, default_value, evaluation_context=None):
        return self._wrong_type(flag_key, default_value)


class FlagFileCopy:
    """The copy of an operator's flagd file that the flagd provider reads: the provider is never
    pointed at the operator's file itself, whose reads it does with a blocking ``open`` on its
    own thread (a FIFO swapped in would block it for good) and whose changes it sees only by a
    newer modification time (a file put back with an older one, as ``cp -p`` or ``rsync -a``
    leave it, would never be read).

    ``refresh()`` reads the source without blocking (``files.read_regular``, regular files only,
    at most ``MAX_FLAG_FILE`` bytes), refuses a YAML file with an alias (``*name``: a few hundred
    bytes of anchors expand to gigabytes in the provider's parse), and writes what it accepts
    atomically to a private directory of its own (``files.write_atomic``, mode 0600): a fresh
    modification time, so the provider reads each accepted version once, whole. A refused or
    unreadable version leaves the copy, and so the provider's flags, as they were. The copy is
    named ``flags.yaml`` for a ``.yaml`` or ``.yml`` source (the provider reads YAML by that
    suffix only), else ``flags.json``. ``digest``: ``sha256:<hex>`` of the copy (what the
    provider reads), ``""`` before the first accepted read. ``close()`` removes the directory."""

    def __init__(self, source: str) -> None:
        import tempfile

        self.source = source
        sweep_copies(tempfile.gettempdir())
        self.directory = tempfile.mkdtemp(prefix=f"{COPY_PREFIX}{os.getpid()}-")
        yaml_file = source.lower().endswith((".yaml", ".yml"))
        self.path = os.path.join(self.directory, "flags.yaml" if yaml_file else "flags.json")
        self.yaml = yaml_file
        self.digest = ""
        self.unreadable = ""
        self.refused = ""
        self._refused_digest = ""   # a refused version is checked once, not at every read
        import atexit

        atexit.register(self.close)   # a process that ends without stop() leaves no copy

    def refresh(self) -> tuple[bool, str, str]:
        """``(changed, unreadable, refused)``: whether a new version was written to the copy;
        why the source cannot be read now (missing, a FIFO, a directory: ``""`` when it can); why
        its content is refused (over the cap, a YAML alias: ``""`` when accepted). The last two
        are kept as ``unreadable`` and ``refused``. Raises OSError when the copy cannot be
        written (its directory removed, the disk full)."""
        self.unreadable = self.refused = ""
        try:
            data = read_regular(self.source, MAX_FLAG_FILE)
        except FileRefused as exc:
            if exc.errno == errno.EFBIG:
                self.refused = str(exc)
            else:
                self.unreadable = str(exc)
            return False, self.unreadable, self.refused
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if digest == self.digest:
            return False, "", ""
        if digest == self._refused_digest:
            self.refused = self._refused_why
            return False, "", self.refused
        # cheapest first: the depth before any parser, the aliases before YAML builds anything
        why = ((nesting_problem(data) or yaml_alias(data)) if self.yaml else "") \
            or definitions_text_problem(data, self.yaml)
        if why:
            self.refused = self._refused_why = f"{self.source} {why}"
            self._refused_digest = digest
            return False, "", self.refused
        try:
            # its directory removed meanwhile (a tmp cleaner): made again, private
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            write_atomic(self.path, data, mode=0o600)
        except OSError as exc:
            self.unreadable = (f"the provider's private copy {self.path} cannot be written "
                               f"({exc.strerror or exc}); the flags read before stay")
            return False, self.unreadable, ""
        self.digest = digest
        return True, "", ""

    _refused_why = ""

    def close(self) -> None:
        """Remove the private directory (idempotent)."""
        import atexit
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)
        atexit.unregister(self.close)


#: the name of a ``FlagFileCopy`` directory begins with this and its process's pid
COPY_PREFIX = "dsv41-flagd-"


def sweep_copies(directory: str) -> list[str]:
    """Remove the ``FlagFileCopy`` directories in ``directory`` whose process is gone (killed:
    no ``stop()``, no exit handler ran), this user's only; returns the paths removed."""
    import shutil

    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        pid = entry.name[len(COPY_PREFIX):].split("-", 1)[0]
        if not entry.name.startswith(COPY_PREFIX) or not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.is_dir(follow_symlinks=False) and st.st_uid == os.getuid() \
                and not pid_alive(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def definitions_text_problem(data: bytes, yaml_file: bool) -> str:
    """Why ``data`` is not a flagd flag definition text (``"is not valid JSON: Expecting ','
    at line 3 column 5; accepted: ..."``), ``""`` when it parses as JSON (or YAML, for
    ``yaml_file``; its aliases refused first by ``yaml_alias``) into an object with a ``flags``
    object. The flagd provider then checks each flag; this says where a file stops parsing,
    which the provider does not."""
    import json

    accepted = ('accepted: flagd\'s flag definitions, {"flags": {"NAME": {"state": ..., '
                '"variants": ..., "defaultVariant": ...}}}')
    try:
        if yaml_file:
            import yaml

            parsed = yaml.safe_load(data.decode("utf-8"))
        else:
            parsed = json.loads(data)
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text (byte {exc.start}); {accepted}"
    except json.JSONDecodeError as exc:
        return f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; {accepted}"
    except RecursionError:
        return f"is nested too deeply to read; {accepted}"
    except Exception as exc:  # yaml.YAMLError and its marks
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or type(exc).__name__
        return f"is not valid YAML: {what}{where}; {accepted}"
    if not isinstance(parsed, dict) or not isinstance(parsed.get("flags"), dict):
        return f"has no flags object at its top; {accepted}"
    return evaluators_problem(parsed)


#: the deepest nesting of brackets or indentation a flag file may have (flagd's own flags
#: nest a few levels; JSON Logic rules a few dozen)
MAX_NESTING = 256


def nesting_problem(data: bytes) -> str:
    """Why the YAML text ``data`` nests too deeply to parse safely (``""`` when it does not),
    found before any parser runs (PyYAML spends time quadratic in the depth: a million
    brackets took minutes): its ``[``/``{`` depth, every bracket counted (a quote cannot hide
    one: YAML's plain scalars hold apostrophes), and its lines' indentation. JSON needs none of
    this: its parser refuses deep nesting at once."""
    depth = deepest = 0
    for byte in data.translate(None, delete=bytes(set(range(256)) - set(b"[]{}"))):
        if byte in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_NESTING:
                    return f"nests deeper than {MAX_NESTING} levels"
        else:
            depth -= 1
    indent = max((len(line) - len(line.lstrip(b" ")) for line in data.splitlines()), default=0)
    if indent > 4 * MAX_NESTING:
        return f"is indented deeper than {4 * MAX_NESTING} columns"
    return ""


def evaluators_problem(parsed: dict) -> str:
    """Why the ``$evaluators`` of a parsed flag file are refused: a ``$ref`` to no evaluator, a
    cycle, or a size once every ``$ref`` is put in place (what flagd's provider builds) over
    ``MAX_FLAG_FILE`` (two refs per level double it: 40 levels of 2 KB are terabytes).
    ``""`` when they are fine or absent. Sizes are computed, never built."""
    import json

    evaluators = parsed.get("$evaluators") or {}
    if not isinstance(evaluators, dict):
        return "has $evaluators that are not an object"
    sizes: dict[str, int] = {}

    def size(node, stack: tuple[str, ...]) -> int:
        if isinstance(node, dict):
            ref = node.get("$ref") if len(node) == 1 else None
            if isinstance(ref, str):
                if ref in stack:
                    raise ValueError(f"has a $ref cycle through {ref!r}")
                if ref not in evaluators:
                    raise ValueError(f"has a $ref to no evaluator: {ref[:40]!r}")
                if ref not in sizes:
                    sizes[ref] = size(evaluators[ref], stack + (ref,))
                return sizes[ref]
            total = 2 + sum(len(json.dumps(k)) + 2 + size(v, stack) for k, v in node.items())
        elif isinstance(node, list):
            total = 2 + sum(size(v, stack) + 1 for v in node)
        else:
            total = len(json.dumps(node))
        if total > MAX_FLAG_FILE:
            raise ValueError(f"expands past {MAX_FLAG_FILE >> 20} MiB once its $ref are put "
                             f"in place")
        return total
    try:
        size(parsed.get("flags"), ())
        for name, rule in evaluators.items():
            size(rule, (name,))
    except ValueError as exc:
        return str(exc)
    return ""


def yaml_alias(data: bytes) -> str:
    """Why the YAML text ``data`` is refused for its aliases (``"has a YAML alias *a at line 3:
    ..."``), ``""`` when it has none or does not parse (the provider then refuses it itself).
    Read as parse events (``yaml.parse``: no object is built, so nothing expands)."""
    import yaml

    try:
        for event in yaml.parse(data.decode("utf-8", "replace")):
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark is not None else "?"
                return (f"has a YAML alias *{str(event.anchor)[:40]} at line {line}: refused "
                        f"(aliases can expand a small file to gigabytes); write each value out")
    except yaml.YAMLError:
        return ""
    return ""


def provider(settings: FleetSettings, token: str, flag_file: FlagFileCopy | None = None
             ) -> AbstractProvider:
    """The provider ``settings`` name (``token``: the Unleash token, "" for none or for flagd;
    ``flag_file``: for flagd, the copy it reads, ``FlagFileCopy``)."""
    if settings.provider == "flagd":
        from openfeature.contrib.provider.flagd import FlagdProvider
        from openfeature.contrib.provider.flagd.config import ResolverType

        if flag_file is None:
            raise ValueError("a flagd provider reads a FlagFileCopy of the flag file")
        # deadline_ms is its file poll: the copy is ours, private and local, so it is checked
        # every 0.1 s (one stat), and an accepted version reaches the flags within that
        return FlagdProvider(resolver_type=ResolverType.FILE,
                             offline_flag_source_path=flag_file.path,
                             deadline_ms=COPY_POLL_MS)
    return UnleashFleetProvider(settings, token)


def unreachable(source: AbstractProvider | None, settings: FleetSettings) -> str:
    """Why the flag service cannot be read now, ``""`` when it can: the Unleash server (its
    ``/health``, the token's refusal); for flagd ``""``: its copy is always there, and the
    operator's file is read by ``FlagFileCopy.refresh``, which says why it cannot be."""
    if isinstance(source, UnleashFleetProvider):
        return source.unreachable()
    return ""


def refusal(source: AbstractProvider) -> str | None:
    """Why the provider refused the flag service's last answer, ``""`` when it took it, or None
    for a provider that says so through OpenFeature's ``PROVIDER_ERROR`` event instead (flagd)."""
    return source.refusal() if isinstance(source, UnleashFleetProvider) else None


def new_domain() -> str:
    """A domain of its own for one connection (``DOMAIN.<random>``): two watchers or a boot
    read beside a watcher in one process never share, or replace, each other's provider."""
    return f"{DOMAIN}.{os.urandom(6).hex()}"


def register(source: AbstractProvider, timeout_s: float, domain: str = DOMAIN) -> tuple[Any, str]:
    """Register ``source`` under ``domain`` and wait at most ``timeout_s`` seconds for it to be
    ready. Returns ``(client, problem)``: the OpenFeature client of the domain, and ``""`` or why
    the provider is not ready (its initialisation raised or did not end in time: it goes on in
    a daemon thread, and the client answers ``PROVIDER_NOT_READY`` until it is)."""
    outcome: dict[str, str] = {}
    done = threading.Event()

    def initialise() -> None:
        try:
            api.set_provider_and_wait(source, domain=domain)
        except Exception as exc:  # the provider's own error, said in the problem
            outcome["problem"] = _failure(exc)
        done.set()

    threading.Thread(target=initialise, name="dsv41-fleet-init", daemon=True).start()
    if not done.wait(timeout_s):
        outcome["problem"] = f"the flag service did not answer within {timeout_s:g} s"
    return api.get_client(domain=domain), outcome.get("problem", "")


def _failure(exc: BaseException) -> str:
    """A provider's failure in words, with its cause when it says nothing itself (flagd's
    ``ProviderNotReadyError`` carries the file's ``FileNotFoundError`` as its cause)."""
    text = masked_reason(exc)
    cause = exc.__cause__ or exc.__context__
    if not str(exc).strip() and cause is not None:
        text = f"{type(exc).__name__} ({masked_reason(cause)})"
    return text[:300]


def unregister(domain: str = DOMAIN) -> None:
    """Shut the domain's provider down (its threads stop): a no-op provider takes its place."""
    api.set_provider(NoOpProvider(), domain=domain)
