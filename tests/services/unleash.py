"""A real Unleash server for tests: a private PostgreSQL 15 cluster and unleash-server 8.2.0 under
Node 22, both listening on 127.0.0.1 only, on free ports.

Installed by ``tests/services/install.sh`` (run by ``./dev setup``) into ``.cache/unleash``.
Pure test-support code: it imports nothing of dsv41_flags.

Use::

    service = UnleashService(Installation.load())
    service.start()                      # PostgreSQL, then Unleash; blocks until /health answers
    service.create_flag("dsv41.smoke")
    service.add_flexible_rollout("dsv41.smoke", "development", rollout=50, stickiness="userId")
    service.set_enabled("dsv41.smoke", "development", True)
    # a client: url=service.url, Authorization: service.client_token("development")
    service.stop_unleash(); service.start_unleash()   # an outage: same port, same database
    service.stop()                       # both process groups ended, the temporary directory removed

Every wait is bounded. Each server runs in its own process group (session) and ``stop`` ends
both groups: SIGTERM, then SIGKILL after ``stop_timeout_s``. When the current user is root,
``initdb`` and ``postgres`` (which refuse root) run as the ``postgres`` user (else ``nobody``)
through ``setpriv``; the cluster's directory is owned by that user.
"""
from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: where tests/services/install.sh puts unleash-server and Node 22
INSTALL_DIR = REPO / ".cache" / "unleash"
START_SCRIPT = Path(__file__).with_name("unleash_start.mjs")
#: the environments an Unleash open-source server has from its first boot
ENVIRONMENTS = ("development", "production")
#: the flag types Unleash knows (``create_flag(type=...)``)
FLAG_TYPES = ("release", "experiment", "operational", "kill-switch", "permission")


class ServiceError(RuntimeError):
    """A server did not start, did not answer in time, or exited; the message ends with the
    tail of its log."""


class AdminApiError(RuntimeError):
    """The Admin API answered with an HTTP error. ``status`` is the HTTP status (int), ``method``
    and ``path`` name the request, ``body`` is the answer's text (Unleash's JSON error)."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.method, self.path, self.status, self.body = method, path, status, body


@dataclass(frozen=True)
class Installation:
    """What ``tests/services/install.sh`` installed: ``node`` (the Node 22 binary),
    ``unleash_dir`` (the npm prefix holding ``node_modules/unleash-server``) and ``pg_bin``
    (the directory of ``initdb``, ``postgres``, ``pg_isready``, ``createdb``)."""

    node: Path
    unleash_dir: Path
    pg_bin: Path

    @classmethod
    def load(cls, install_dir: Path = INSTALL_DIR) -> Installation | None:
        """The installation recorded in ``install_dir/install.env``; None when the install step
        has not run there (no such file). Raises ServiceError when the file names binaries that
        are missing (a broken or partial install: run the install step again)."""
        record = install_dir / "install.env"
        if not record.is_file():
            return None
        values = dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)
        if not {"NODE", "PG_BIN", "UNLEASH_SERVER"} <= values.keys():
            raise ServiceError(f"{record} lacks NODE, PG_BIN or UNLEASH_SERVER: run "
                               f"tests/services/install.sh again")
        found = cls(node=install_dir / values["NODE"], unleash_dir=install_dir,
                    pg_bin=Path(values["PG_BIN"]))
        missing = [str(p) for p in (found.node, found.pg_bin / "initdb", found.pg_bin / "postgres",
                                    install_dir / values["UNLEASH_SERVER"] / "package.json")
                   if not p.exists()]
        if missing:
            raise ServiceError(f"{record} names missing files ({', '.join(missing)}): run "
                               f"tests/services/install.sh again")
        return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the time of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def constraint(context_name: str, operator: str = "IN", values: Iterable[str] = (), *,
               inverted: bool = False, case_insensitive: bool = False) -> dict:
    """One strategy constraint in the Admin API's shape, e.g. ``constraint("cluster", "IN",
    ["canary"])``. ``operator`` is one of Unleash's operators (IN, NOT_IN, STR_CONTAINS,
    STR_STARTS_WITH, STR_ENDS_WITH, NUM_EQ, NUM_GT, NUM_GTE, NUM_LT, NUM_LTE, DATE_AFTER,
    DATE_BEFORE, SEMVER_EQ, SEMVER_GT, SEMVER_LT); the single-value operators (NUM_*, DATE_*,
    SEMVER_*) take exactly one value. ``context_name`` is a built-in field (userId, sessionId,
    remoteAddress, environment, appName, currentTime) or a custom one (``ensure_context_field``)."""
    values = [str(v) for v in values]
    out: dict[str, Any] = {"contextName": context_name, "operator": operator,
                           "inverted": inverted, "caseInsensitive": case_insensitive}
    if operator.startswith(("NUM_", "DATE_", "SEMVER_")):
        if len(values) != 1:
            raise ValueError(f"operator {operator} takes exactly one value, got {values}")
        out["value"] = values[0]
    else:
        out["values"] = values
    return out


def variant(name: str, payload: Any = None, *, payload_type: str | None = None,
            weight: int | None = None, stickiness: str = "default") -> dict:
    """One strategy variant in the Admin API's shape. ``payload``: None (no payload), a str
    (``payload_type`` "string" unless given), or any JSON value (type "json", serialised).
    ``weight`` (0..1000, per mille) fixes this variant's share; None lets Unleash share the rest
    out evenly (weightType "variable"). A strategy needs at least one variable variant (the
    Admin API answers 400 otherwise)."""
    out: dict[str, Any] = {"name": name, "stickiness": stickiness,
                           "weightType": "fix" if weight is not None else "variable",
                           "weight": weight if weight is not None else 0}
    if payload is not None:
        if payload_type is None:
            payload_type = "string" if isinstance(payload, str) else "json"
        value = payload if isinstance(payload, str) else json.dumps(payload)
        out["payload"] = {"type": payload_type, "value": value}
    return out


def _end_group(proc: subprocess.Popen | None, timeout_s: float) -> None:
    """End ``proc``'s process group (``proc`` leads it): SIGTERM, up to ``timeout_s`` for the
    leader to exit, then SIGKILL to whatever is left in the group. Raises
    subprocess.TimeoutExpired when the leader outlives SIGKILL by ``timeout_s``."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group is empty
    proc.wait(timeout=timeout_s)


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return f"--- {path.name} (last {limit} characters) ---\n{text[-limit:]}"


class UnleashService:
    """One Unleash server with its own PostgreSQL cluster, in a fresh temporary directory.

    ``boot_timeout_s`` bounds each wait for a server to answer (PostgreSQL, then Unleash's
    /health: the first boot runs Unleash's database migrations, about 10-20 s here);
    ``stop_timeout_s`` bounds each step of ending a process group; ``http_timeout_s`` bounds each
    Admin API request. ``base_dir``: where the temporary directory is made (None: the system
    temp directory; it must be reachable by the ``postgres`` user when running as root).
    """

    def __init__(self, installation: Installation, *, boot_timeout_s: float = 120.0,
                 stop_timeout_s: float = 10.0, http_timeout_s: float = 10.0,
                 base_dir: Path | None = None) -> None:
        self.installation = installation
        self.boot_timeout_s = boot_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.http_timeout_s = http_timeout_s
        self._base_dir = base_dir
        self.dir: Path | None = None  # the temporary directory while started
        self.pg_port: int | None = None
        self.port: int | None = None
        self._pg: subprocess.Popen | None = None
        self._unleash: subprocess.Popen | None = None
        self._db_password = secrets.token_hex(16)
        self._admin_token = f"*:*.{secrets.token_hex(24)}"
        self._client_tokens = {env: f"*:{env}.{secrets.token_hex(24)}" for env in ENVIRONMENTS}
        #: seconds each start_unleash() took until /health answered (first boot first)
        self.boot_seconds: list[float] = []

    # -- what clients need ------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (raises ServiceError before ``start``)."""
        if self.port is None:
            raise ServiceError("UnleashService is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The API URL SDKs take (UnleashClient, the OpenFeature provider):
        ``http://127.0.0.1:PORT/api``."""
        return f"{self.base_url}/api"

    @property
    def admin_token(self) -> str:
        """The admin API token (``*:*.<secret>``), sent as the Authorization header."""
        return self._admin_token

    def client_token(self, environment: str = "development") -> str:
        """The backend (client SDK) token of ``environment`` (one of ENVIRONMENTS), all projects:
        ``*:<environment>.<secret>``. Raises KeyError for another environment."""
        return self._client_tokens[environment]

    @property
    def pids(self) -> dict[str, int]:
        """The process ids (each a process group leader) of the servers that run now:
        ``{"postgres": ..., "unleash": ...}``, a server left out while it is not running."""
        procs = {"postgres": self._pg, "unleash": self._unleash}
        return {name: p.pid for name, p in procs.items() if p is not None and p.poll() is None}

    @property
    def running(self) -> bool:
        """True while the Unleash process runs (it may still be booting)."""
        return self._unleash is not None and self._unleash.poll() is None

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Make the temporary directory, initialise and start PostgreSQL, create the database
        ``unleash``, then start Unleash and wait for /health. Raises ServiceError (with the
        failing server's log tail) when a step fails or a wait runs out; everything started so
        far is then stopped and removed."""
        if self.dir is not None:
            raise ServiceError("UnleashService is already started")
        base = self._base_dir or Path(tempfile.gettempdir())
        self.dir = Path(tempfile.mkdtemp(prefix="dsv41-unleash-", dir=base))
        try:
            self._start_postgres()
            self.port = free_port()
            self.start_unleash()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End Unleash's then PostgreSQL's process group and remove the temporary directory.
        Safe to call more than once and after a failed ``start``."""
        try:
            self.stop_unleash()
        finally:
            _end_group(self._pg, self.stop_timeout_s)
            self._pg = None
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None
            self.port = self.pg_port = None

    def stop_unleash(self) -> None:
        """End only Unleash's process group (PostgreSQL keeps running): clients see connection
        refused on the same port until ``start_unleash``."""
        _end_group(self._unleash, self.stop_timeout_s)
        self._unleash = None

    def start_unleash(self) -> float:
        """Start Unleash on ``self.port`` against the same database and wait for /health.
        Returns the seconds until /health answered. Raises ServiceError when it is already
        running, exits, or does not answer within ``boot_timeout_s``."""
        if self.dir is None or self._pg is None:
            raise ServiceError("start() first: PostgreSQL is not running")
        if self.running:
            raise ServiceError("Unleash is already running")
        assert self.port is not None and self.pg_port is not None
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.dir),
            "LANG": "C.UTF-8",
            "NODE_ENV": "production",
            "DATABASE_URL": (f"postgres://unleash:{self._db_password}@127.0.0.1:{self.pg_port}"
                             f"/unleash"),
            "DATABASE_SSL": "false",
            "HTTP_HOST": "127.0.0.1",
            "HTTP_PORT": str(self.port),
            "UNLEASH_URL": f"http://127.0.0.1:{self.port}",
            "LOG_LEVEL": "warn",
            "INIT_ADMIN_API_TOKENS": self._admin_token,
            "INIT_CLIENT_API_TOKENS": ",".join(self._client_tokens.values()),
            # the built-in admin user gets a secret password instead of the documented default
            "UNLEASH_DEFAULT_ADMIN_PASSWORD": secrets.token_urlsafe(18),
            "CHECK_VERSION": "false",
            "SEND_TELEMETRY": "false",
            "SCARF_ANALYTICS": "false",
            "DO_NOT_TRACK": "1",
            "GRACEFUL_SHUTDOWN_TIMEOUT": "1000",
        }
        log = self.dir / "unleash.log"
        t0 = time.monotonic()
        self._unleash = self._spawn([str(self.installation.node), str(START_SCRIPT),
                                     str(self.installation.unleash_dir)], log, env)
        deadline = t0 + self.boot_timeout_s
        while True:
            if self._unleash.poll() is not None:
                rc = self._unleash.returncode
                self._unleash = None
                raise ServiceError(f"unleash-server exited with status {rc} while booting\n"
                                   f"{_tail(log)}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=1.0) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop_unleash()
                raise ServiceError(f"unleash-server did not answer /health within "
                                   f"{self.boot_timeout_s:.0f} s\n{_tail(log)}")
            time.sleep(0.2)
        took = time.monotonic() - t0
        self.boot_seconds.append(took)
        return took

    def _start_postgres(self) -> None:
        assert self.dir is not None
        pg_bin = self.installation.pg_bin
        pg_dir = self.dir / "pg"
        data, run = pg_dir / "data", pg_dir / "run"
        run.mkdir(parents=True)
        (pg_dir / "pwfile").write_text(self._db_password + "\n")
        as_user: list[str] = []
        if os.geteuid() == 0:
            # initdb and postgres refuse root: the cluster belongs to an unprivileged user
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                user = pwd.getpwnam("nobody")
            os.chmod(self.dir, 0o711)  # traversable, not listable, by that user
            for p in (pg_dir, run, pg_dir / "pwfile"):
                os.chown(p, user.pw_uid, user.pw_gid)
            as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                       "--init-groups", "--"]
        init_log = self.dir / "initdb.log"
        with open(init_log, "wb") as out:
            done = subprocess.run(
                [*as_user, str(pg_bin / "initdb"), "-D", str(data), "-U", "unleash",
                 f"--pwfile={pg_dir / 'pwfile'}", "--auth-host=scram-sha-256",
                 "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                timeout=self.boot_timeout_s, start_new_session=True, cwd=pg_dir)
        if done.returncode != 0:
            raise ServiceError(f"initdb failed with status {done.returncode}\n{_tail(init_log)}")
        self.pg_port = free_port()
        log = self.dir / "postgres.log"
        self._pg = self._spawn(
            [*as_user, str(pg_bin / "postgres"), "-D", str(data), "-p", str(self.pg_port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={run}",
             # a throw-away cluster: no durability, small memory
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "shared_buffers=32MB", "-c", "max_connections=40"],
            log, {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"}, cwd=pg_dir)
        pg_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PGPASSWORD": self._db_password,
                  "PGCONNECT_TIMEOUT": "2"}
        deadline = time.monotonic() + self.boot_timeout_s
        while True:
            if self._pg.poll() is not None:
                rc = self._pg.returncode
                self._pg = None
                raise ServiceError(f"postgres exited with status {rc} while starting\n{_tail(log)}")
            ready = subprocess.run(
                [str(pg_bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.pg_port),
                 "-t", "1"], env=pg_env, stdin=subprocess.DEVNULL, timeout=5)
            if ready.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise ServiceError(f"postgres did not accept connections within "
                                   f"{self.boot_timeout_s:.0f} s\n{_tail(log)}")
            time.sleep(0.1)
        made = subprocess.run(
            [str(pg_bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "unleash",
             "unleash"], env=pg_env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=30)
        if made.returncode != 0:
            raise ServiceError(f"createdb failed with status {made.returncode}: {made.stderr}")

    @staticmethod
    def _spawn(argv: Sequence[str], log: Path, env: Mapping[str, str],
               cwd: Path | None = None) -> subprocess.Popen:
        """Start ``argv`` as the leader of a new session (its own process group), stdin closed,
        stdout and stderr appended to ``log``."""
        with open(log, "ab") as out:
            return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                                    start_new_session=True)

    # -- Admin API ----------------------------------------------------------------------------

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """One Admin API request with the admin token: ``path`` below the base URL (e.g.
        ``/api/admin/projects/default/features``), ``body`` sent as JSON when not None.
        Returns the decoded JSON answer, or None for an empty one. Raises AdminApiError on an
        HTTP error status and OSError (URLError, timeout after ``http_timeout_s``) when the
        server cannot be reached."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method, headers={
            "Authorization": self._admin_token, "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            with urllib.request.urlopen(req, timeout=self.http_timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise AdminApiError(method, path, err.code, err.read().decode(errors="replace")) \
                from None
        return json.loads(raw) if raw.strip() else None

    @staticmethod
    def _flag_path(name: str, project: str) -> str:
        return (f"/api/admin/projects/{urllib.parse.quote(project, safe='')}/features/"
                f"{urllib.parse.quote(name, safe='')}")

    def create_flag(self, name: str, *, type: str = "release", description: str = "",
                    impression_data: bool = False, project: str = "default") -> dict:
        """Create flag ``name`` (e.g. ``dsv41.folded_fence``; Unleash allows letters, digits and
        ``._~-``) of ``type`` (one of FLAG_TYPES) in ``project``. It starts disabled in every
        environment, with no strategy. Returns the created flag as the API describes it.
        Raises AdminApiError (409 when the name exists, also archived; 400 for a bad name)."""
        return self.admin("POST", f"/api/admin/projects/{project}/features", {
            "name": name, "type": type, "description": description,
            "impressionData": impression_data})

    def flag(self, name: str, *, project: str = "default") -> dict:
        """The flag as the Admin API describes it: ``environments`` with ``enabled`` and
        ``strategies`` each. Raises AdminApiError (404 when there is no such flag)."""
        return self.admin("GET", self._flag_path(name, project))

    def set_enabled(self, name: str, environment: str, enabled: bool, *,
                    project: str = "default") -> None:
        """Switch flag ``name`` on or off in ``environment``. Switching on a flag without a
        strategy there makes Unleash add its default strategy (flexibleRollout, 100 %), so the
        flag is on for everyone. Raises AdminApiError."""
        self.admin("POST", f"{self._flag_path(name, project)}/environments/{environment}/"
                           f"{'on' if enabled else 'off'}")

    def add_flexible_rollout(self, name: str, environment: str, *, rollout: int = 100,
                             stickiness: str = "default", group_id: str | None = None,
                             constraints: Iterable[Mapping] = (),
                             variants: Iterable[Mapping] = (), title: str | None = None,
                             disabled: bool = False, project: str = "default") -> str:
        """Add a ``flexibleRollout`` strategy to flag ``name`` in ``environment``: on for
        ``rollout`` percent (0..100) of the values of ``stickiness`` ("default": userId, else
        sessionId, else random; "random"; or a context field name such as "userId", "sessionId"
        or a custom field made with ``ensure_context_field(stickiness=True)``), hashed with
        ``group_id`` (None: the flag's name); only for contexts matching every one of
        ``constraints`` (``constraint(...)``); ``variants`` (``variant(...)``) are handed out
        when it matches. Returns the strategy's id. Does not switch the environment on.
        Raises ValueError for a rollout out of range and AdminApiError."""
        if not 0 <= rollout <= 100:
            raise ValueError(f"rollout must be 0..100 percent, got {rollout}")
        body: dict[str, Any] = {
            "name": "flexibleRollout", "disabled": disabled,
            "constraints": [dict(c) for c in constraints],
            "parameters": {"rollout": str(rollout), "stickiness": stickiness,
                           "groupId": group_id if group_id is not None else name},
            "variants": [dict(v) for v in variants]}
        if title is not None:
            body["title"] = title
        made = self.admin("POST", f"{self._flag_path(name, project)}/environments/{environment}/"
                                  f"strategies", body)
        return made["id"]

    def update_flexible_rollout(self, name: str, environment: str, strategy_id: str, *,
                                rollout: int = 100, stickiness: str = "default",
                                group_id: str | None = None, constraints: Iterable[Mapping] = (),
                                variants: Iterable[Mapping] = (), disabled: bool = False,
                                project: str = "default") -> None:
        """Replace strategy ``strategy_id`` of flag ``name`` in ``environment`` with the given
        flexibleRollout (same arguments as ``add_flexible_rollout``). Raises AdminApiError."""
        if not 0 <= rollout <= 100:
            raise ValueError(f"rollout must be 0..100 percent, got {rollout}")
        self.admin("PUT", f"{self._flag_path(name, project)}/environments/{environment}/"
                          f"strategies/{strategy_id}", {
            "name": "flexibleRollout", "disabled": disabled,
            "constraints": [dict(c) for c in constraints],
            "parameters": {"rollout": str(rollout), "stickiness": stickiness,
                           "groupId": group_id if group_id is not None else name},
            "variants": [dict(v) for v in variants]})

    def remove_strategy(self, name: str, environment: str, strategy_id: str, *,
                        project: str = "default") -> None:
        """Delete strategy ``strategy_id`` of flag ``name`` in ``environment``. An enabled
        environment left without a strategy is on for nobody. Raises AdminApiError."""
        self.admin("DELETE", f"{self._flag_path(name, project)}/environments/{environment}/"
                             f"strategies/{strategy_id}")

    def strategies(self, name: str, environment: str, *, project: str = "default") -> list[dict]:
        """The strategies of flag ``name`` in ``environment``, in evaluation order."""
        return self.admin("GET", f"{self._flag_path(name, project)}/environments/{environment}/"
                                 f"strategies")

    def ensure_context_field(self, name: str, *, legal_values: Iterable[str] = (),
                             stickiness: bool = False, description: str = "") -> None:
        """Make custom context field ``name`` (e.g. "cluster") exist, so that constraints and
        (with ``stickiness=True``) flexibleRollout stickiness may use it. Clients send it in
        the context's ``properties`` (UnleashClient also moves unknown top-level keys there).
        An existing field is updated to these values. Raises AdminApiError."""
        body = {"name": name, "description": description, "stickiness": stickiness,
                "legalValues": [{"value": str(v)} for v in legal_values]}
        try:
            self.admin("GET", f"/api/admin/context/{urllib.parse.quote(name, safe='')}")
        except AdminApiError as err:
            if err.status != 404:
                raise
            self.admin("POST", "/api/admin/context", body)
        else:
            self.admin("PUT", f"/api/admin/context/{urllib.parse.quote(name, safe='')}", body)

    def archive_flag(self, name: str, *, project: str = "default") -> None:
        """Archive flag ``name``: clients stop receiving it; the name stays taken until the
        archived flag is deleted (``delete_archived_flag``). Raises AdminApiError."""
        self.admin("DELETE", self._flag_path(name, project))

    def delete_archived_flag(self, name: str) -> None:
        """Delete archived flag ``name`` for good, freeing its name. Raises AdminApiError."""
        self.admin("DELETE", f"/api/admin/archive/{urllib.parse.quote(name, safe='')}")

    def events(self, name: str) -> list[dict]:
        """The audit log of flag ``name``, newest first: dicts with ``type`` (e.g.
        "feature-created", "feature-environment-enabled", "feature-strategy-add"),
        ``createdAt``, ``environment``, ``data``, ``preData``."""
        return self.admin("GET", f"/api/admin/events/{urllib.parse.quote(name, safe='')}")["events"]
