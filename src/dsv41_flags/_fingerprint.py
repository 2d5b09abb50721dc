"""Launch fingerprint: sha256 over what makes two launches "the same" for caches.

Payload (canonical JSON, sorted keys, no whitespace):
  ``argv``: the command line as ``[program, *args]`` (see ``normalize_argv``: the same whether
  typed after ``dsv41-flags run --`` or read from ``sys.argv``) without volatile options
  (``--port 30000`` / ``--port=30000``);
  ``env``: variables under a prefix (the engine's, ``DSV41_``, the settings') that are neither
  volatile, nor reserved, nor the variable of a flag or option (those enter by resolved value,
  below), renamed as the engine reads them (legacy spellings, ``EngineFacts.canonical_env``);
  ``settings``: resolved value of every non-volatile flag and option, whatever its source.
Prefixes and volatile names add up from three places: the engine adapter's defaults
(``EngineAdapter.fingerprint``), the settings (``fingerprint.prefixes`` / ``volatile`` /
``volatile_argv``, profile sections add to ``[default]``) and the feature declarations
(``volatile=``, ``Option(volatile=)``); ``Fingerprint.excluded`` / ``included`` say which one
decided each key.
Source: seed autotune_keep.py ``launch_fingerprint`` (sglang#40320 context); issue 15.
"""
from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import fnmatch
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ._declare import Feature
from ._names import ENV_PREFIX, RESERVED_KEYS, suggest
from ._errors import DeclarationError
from ._files import read_regular
from ._resolution import Resolution, _jsonable

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import EngineFacts

SIDECAR_SUFFIX = ".launch"


#: the framework's own variables always enter (by resolved value for flags and options)
CORE_PREFIXES = {ENV_PREFIX: "dsv41_flags: its own variables"}


def engine_facts() -> EngineFacts:
    """The engine adapter's fingerprint facts (``_engine.adapter().fingerprint``: the adapter
    room is the one place that knows the engine); ``NO_FACTS`` without an engine adapter."""
    from ._engine import NO_FACTS, adapter

    return adapter().fingerprint or NO_FACTS


@dataclass(frozen=True)
class Fingerprint:
    """A launch fingerprint.

    digest: 64 hex chars (sha256 of the canonical payload); payload: ``{"argv": [str],
    "env": {str: str}, "settings": {KEY: value}}``; excluded: name -> why it was left out
    (engine default, settings file [section] or feature declaration that made it volatile,
    "reserved", "enters by resolved value"); included: key of the payload -> why it is in
    (the prefix and who declared it, the feature owning a flag or option).
    """

    digest: str
    payload: Mapping[str, Any]
    excluded: Mapping[str, str]
    included: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready dict (``digest``, ``payload``, ``excluded``) for the snapshot; ``included``
        (explanations only, one per key of the payload) stays out to keep the snapshot small."""
        return {"digest": self.digest, "payload": dict(self.payload), "excluded": dict(self.excluded)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Fingerprint":
        """Inverse of ``to_dict``. Raises KeyError when ``digest`` or ``payload`` is missing."""
        return cls(d["digest"], d["payload"], d.get("excluded", {}), d.get("included", {}))


def canonical(payload: Mapping[str, Any]) -> bytes:
    """Canonical JSON bytes of a payload: sorted keys, compact separators, UTF-8."""
    return json.dumps(_jsonable(payload), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True).encode()


def volatile_names(resolution: Resolution, features: Sequence[Feature],
                   facts: EngineFacts | None = None) -> dict[str, str]:
    """Every volatile name (variable or argv option) -> who declared it volatile: the engine
    adapter's defaults, the settings files ([section] of each), the features' declarations
    (``volatile=``, ``Option(volatile=True)``). A name declared by several lists them all."""
    facts = engine_facts() if facts is None else facts
    names: dict[str, list[str]] = {}
    for name, why in facts.volatile.items():
        names.setdefault(name, []).append(f"engine default (shipped for {facts.engine}: {why})")
    for name, origin in resolution.volatile_sources.items():
        names.setdefault(name, []).append(origin)
    for feature in features:
        for name in feature.volatile:
            names.setdefault(name, []).append(f"feature {feature.name} (declared volatile=)")
        for option in feature.options:
            if option.volatile:
                names.setdefault(ENV_PREFIX + feature.option_key(option), []).append(
                    f"feature {feature.name} (option {option.name} declared volatile)")
    return {name: "; ".join(dict.fromkeys(why)) for name, why in names.items()}


def prefix_sources(resolution: Resolution, facts: EngineFacts | None = None) -> dict[str, str]:
    """Every variable prefix that enters the fingerprint -> who declared it (engine default,
    dsv41_flags itself, settings file [section])."""
    facts = engine_facts() if facts is None else facts
    out: dict[str, list[str]] = {}
    for prefix, why in facts.prefixes.items():
        out.setdefault(prefix, []).append(f"engine default (shipped for {facts.engine}: {why})")
    for prefix, why in CORE_PREFIXES.items():
        out.setdefault(prefix, []).append(why)
    cfg = resolution.reserved.get("FINGERPRINT", {}) or {}
    sources = cfg.get("prefix_sources", {}) or {}
    for prefix in cfg.get("prefixes", ()):
        out.setdefault(prefix, []).append(sources.get(prefix, "settings fingerprint.prefixes"))
    return {p: "; ".join(dict.fromkeys(why)) for p, why in out.items()}


def check_volatile_declarations(features: Sequence[Feature], facts: EngineFacts | None = None) -> None:
    """Every name in a feature's ``volatile=`` must name something: a ``DSV41_`` flag or option
    variable of the feature set (or a reserved name), a variable under a prefix the engine reads,
    or a launch option (``--port``). Raises DeclarationError naming the feature, its file, the
    name and the closest match (``DSV41_CAP_NEW_TOKEN``: did you mean ``DSV41_CAP_NEW_TOKENS``?).
    Run at discovery, against the whole set: a feature may declare another feature's keys."""
    facts = engine_facts() if facts is None else facts
    known = {ENV_PREFIX + k for f in features for k in f.keys()} | {ENV_PREFIX + k for k in RESERVED_KEYS}
    engine_prefixes = tuple(facts.prefixes)
    for feature in features:
        for name in feature.volatile:
            if not isinstance(name, str) or not name.strip():
                raise DeclarationError(f"feature {feature.name!r} ({feature.source}): volatile entry "
                                       f"{name!r} is not a variable or option name")
            if name.startswith("-"):
                if name.startswith("--") and len(name) > 2:
                    continue
                reason = "is no launch option (spell one --name)"
            elif name.startswith(ENV_PREFIX):
                if name in known:
                    continue
                reason = "matches no flag, option or reserved name of the feature set"
            elif name.startswith(engine_prefixes):
                continue
            else:
                reason = (f"is neither a {ENV_PREFIX} flag/option variable nor under a prefix the "
                          f"engine reads ({', '.join(engine_prefixes)})")
            candidates = sorted(known) + [p + "..." for p in engine_prefixes]
            raise DeclarationError(
                f"feature {feature.name!r} ({feature.source}): volatile name {name!r} {reason}"
                + suggest(name, candidates)
                + " (a misspelt volatile name would leave the real one in the fingerprint)")


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """The launch command as ``[program, *args]`` whoever wrote it: ``python -m sglang.launch_server
    --tp 4`` (as typed after ``dsv41-flags run --``) and ``sys.argv`` of that process
    (``[".../site-packages/sglang/launch_server.py", "--tp", "4"]``) both give
    ``["sglang.launch_server", "--tp", "4"]``. Interpreter options before ``-m``/script are dropped
    and ``--opt=value`` is spelled ``--opt value``. The program's identity is kept: the module of
    ``-m MOD``, the script path (as a dotted name), and ``-c CODE`` as ``["-c", CODE, *args]``
    (``python -c a`` and ``python -c b`` are different launches). A process reading its own
    command line uses ``own_argv`` (``sys.argv`` has lost the code of ``-c``)."""
    argv = [str(a) for a in argv]
    if not argv:
        return []
    if Path(argv[0]).name.startswith("python"):
        i = 1
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
            token = argv[i]
            if token == "--":  # end of the interpreter's options: a script follows
                i += 1
                break
            if token.startswith("--"):  # --check-hash-based-pycs MODE and the like
                i += 2 if token == "--check-hash-based-pycs" else 1
                continue
            # one token of single-letter options, as CPython reads it: -B -I, -Bc CODE, -mmod
            for j, letter in enumerate(token[1:], start=1):
                if letter in "cmXW":
                    rest = token[j + 1:]
                    value = rest if rest else (argv[i + 1] if i + 1 < len(argv) else None)
                    after = i + 1 if rest else i + 2
                    if letter == "m" and value is not None:  # the module is the program
                        return [value] + _split_eq(argv[after:])
                    if letter == "c" and value is not None:  # the code is the program: keep it
                        return ["-c", value] + _split_eq(argv[after:])
                    i = after
                    break
            else:
                i += 1
        if i >= len(argv):
            return ["python"]
        return [_program(argv[i])] + _split_eq(argv[i + 1:])
    return [_program(argv[0])] + _split_eq(argv[1:])


def own_argv() -> list[str]:
    """This process's launch command for ``normalize_argv``: ``sys.argv``, except under
    ``python -c CODE`` (``sys.argv[0] == "-c"``, the code is gone) where ``sys.orig_argv`` (the
    interpreter's own argv, code included) is used."""
    import sys

    argv = list(sys.argv)
    if argv[:1] == ["-c"] and getattr(sys, "orig_argv", None):
        return list(sys.orig_argv)
    return argv


def _split_eq(args: list[str]) -> list[str]:
    """``--tp=4`` -> ``--tp 4``: one spelling per option."""
    out: list[str] = []
    for a in args:
        if a.startswith("--") and "=" in a:
            out.extend(a.split("=", 1))
        else:
            out.append(a)
    return out


def _program(path: str) -> str:
    """A script as a dotted module name: its stem, prefixed by every enclosing package (directories
    with ``__init__.py``): ``.../site-packages/sglang/launch_server.py`` -> ``sglang.launch_server``,
    ``./serve.py`` -> ``serve``. Anything else: its file name."""
    if path in ("-c", "-"):
        return path
    p = Path(path)
    if p.suffix != ".py":
        return p.name
    try:
        p = p.resolve()
    except OSError:
        pass
    parts = [] if p.stem in ("__main__", "__init__") else [p.stem]
    parent = p.parent
    while (parent / "__init__.py").is_file() and parent.name.isidentifier():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts) or p.name


def _strip_argv(argv: Sequence[str], volatile_argv: set[str], excluded: dict, volatile: dict) -> list[str]:
    out: list[str] = []
    skip_next = False
    for token in argv:
        if skip_next:
            skip_next = False
            if not token.startswith("-"):
                continue
        opt = token.split("=", 1)[0]
        if opt in volatile_argv:
            excluded[opt] = volatile.get(opt, "settings fingerprint.volatile_argv")
            skip_next = "=" not in token
            continue
        out.append(token)
    return out


def compute(resolution: Resolution, features: Sequence[Feature], argv: Sequence[str],
            environ: Mapping[str, str], facts: EngineFacts | None = None) -> Fingerprint:
    """Compute the launch fingerprint of this launch. Pure function of its inputs.

    facts: the engine's contribution (default: the engine adapter's, ``EngineAdapter.fingerprint``):
    its prefixes and volatile names are used in addition to the settings' and the features', and
    its ``canonical_env`` renames legacy spellings before hashing."""
    facts = engine_facts() if facts is None else facts
    cfg = resolution.reserved.get("FINGERPRINT", {}) or {}
    prefixes = prefix_sources(resolution, facts)
    volatile = volatile_names(resolution, features, facts)
    volatile_argv = {n for n in volatile if n.startswith("-")} | set(cfg.get("volatile_argv", ()))
    excluded: dict[str, str] = {}
    included: dict[str, str] = {"argv": "the launch command as [program, *args] (-c CODE, -m MODULE "
                                        "or the script kept), volatile options left out"}
    spelled, argv_notes = facts.canonical_argv(normalize_argv(argv))
    if volatile_argv:
        # the engine respells options (aliases, abbreviations): respell the volatile ones alike
        head = list(itertools.takewhile(lambda t: not t.startswith("-"), spelled))
        names = sorted(volatile_argv)
        # (the program part may be respelled too, e.g. to another program: skip what it became)
        respelled = facts.canonical_argv(head + names)[0][len(facts.canonical_argv(head)[0]):]
        for old, new in zip(names, respelled):
            if new != old and new not in volatile_argv:
                volatile_argv.add(new)
                volatile.setdefault(new, volatile.get(old, "settings fingerprint.volatile_argv")
                                    + f" (declared as {old})")
    argv_part = _strip_argv(spelled, volatile_argv, excluded, volatile)
    if argv_notes:
        included["argv"] += "; " + "; ".join(f"{k}: {v}" for k, v in sorted(argv_notes.items()))

    setting_vars = {ENV_PREFIX + k for k in resolution.values}
    reserved_vars = {ENV_PREFIX + k for k in RESERVED_KEYS}
    ordered = sorted(prefixes, key=len, reverse=True)  # the longest prefix explains a name
    selected = {k: v for k, v in environ.items() if k.startswith(tuple(ordered))}
    env, notes = facts.canonical_env(selected)
    for name, note in notes.items():
        if name not in env:
            excluded[name] = note
    env_part = {}
    for name in sorted(env):
        prefix = next((p for p in ordered if name.startswith(p)), None)
        if prefix is None:
            continue
        if name in volatile:
            excluded[name] = volatile[name]
        elif name in reserved_vars or name.split("__")[0] in reserved_vars:
            excluded[name] = "reserved name of dsv41_flags"
        elif name in setting_vars:
            excluded[name] = "enters by resolved value (settings)"
        else:
            env_part[name] = env[name]
            included[name] = f"prefix {prefix}: {prefixes[prefix]}" + (
                f"; {notes[name]}" if name in notes else "")
    settings_part = {}
    for key, resolved in sorted(resolution.values.items()):
        if ENV_PREFIX + key in volatile:
            excluded.setdefault(key, volatile[ENV_PREFIX + key])
        else:
            settings_part[key] = resolved.value
            what = f"option {resolved.option}" if resolved.option else "flag"
            included[key] = (f"{what} of feature {resolved.feature} (not declared volatile), "
                             f"resolved from {resolved.source}")
    payload = {"argv": argv_part, "env": env_part, "settings": _jsonable(settings_part)}
    return Fingerprint(hashlib.sha256(canonical(payload)).hexdigest(), payload, excluded, included)


# ------------------------------------------------------------------------------- sidecar
def sidecar_path(cache_path: os.PathLike | str) -> Path:
    """Sidecar beside a cache file: ``x.json`` -> ``x.launch`` (seed autotune_keep.py)."""
    return Path(cache_path).with_suffix(SIDECAR_SUFFIX)


#: temporary files of ``write_sidecar``: ``.<name>.dsv41-<host>-<pid>-<random>.tmp``
TEMP_TAG = ".dsv41-"
#: a temporary file older than this is left over by a crashed write, whatever its pid
TEMP_MAX_AGE_S = 3600.0


class SymlinkRefused(OSError):
    """A write or move would go through a symbolic link (``errno.ELOOP``): refused."""


def _host() -> str:
    return os.uname().nodename.replace("-", "_").replace(".", "_") or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale_temps(directory: os.PathLike | str, name: str | None = None, *,
                      patterns: Sequence[str] = (), max_age_s: float = TEMP_MAX_AGE_S,
                      now: float | None = None) -> list[Path]:
    """Remove temporary files left by crashed writes in ``directory``; returns those removed.

    Own temporaries (``.<name>.dsv41-<host>-<pid>-<random>.tmp``, only those of ``name`` when
    given) go when their pid is dead on this host, or when older than ``max_age_s`` (another host,
    or a reused pid); files matching ``patterns`` (globs of other writers' temporaries, e.g.
    FlashInfer's ``.autotuner_*.tmp``) go when older than ``max_age_s``. Symbolic links are
    never followed (``lstat``; ``unlink`` removes a link itself). Never raises: a file that
    vanished, or a directory where nothing can be removed, is skipped."""
    directory = Path(directory)
    now = time.time() if now is None else now
    removed: list[Path] = []
    host = _host()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        fname = entry.name
        own = fname.startswith(".") and fname.endswith(".tmp") and TEMP_TAG in fname and \
            (name is None or fname.startswith(f".{name}{TEMP_TAG}"))
        other = any(fnmatch.fnmatch(fname, pat) for pat in patterns)
        if not (own or other):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        old = now - st.st_mtime > max_age_s
        dead = False
        if own and not old:
            parts = fname.rsplit(TEMP_TAG, 1)[1].split("-")
            if len(parts) >= 3 and parts[0] == host and parts[1].isdigit():
                pid = int(parts[1])
                dead = pid != os.getpid() and not _pid_alive(pid)
        if old or dead:
            try:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            except OSError:
                pass
    return removed


def write_sidecar(path: os.PathLike | str, fingerprint: Fingerprint) -> Path:
    """Write ``{"fingerprint", "payload"}`` JSON to ``path`` atomically: a temporary file in the
    same directory (``.<name>.dsv41-<host>-<pid>-<random>.tmp``), fsync, rename; readers see the
    old file or the new one, never half of one. Temporaries of crashed writes are removed first
    (``clean_stale_temps``).

    Never through a symbolic link: ``path`` itself being a link raises ``SymlinkRefused``
    (``errno.ELOOP``); the temporary is created with ``O_EXCL | O_NOFOLLOW``. The file is created
    by the kernel with mode 0o666 minus the process umask (thread-safe: the umask is never
    changed); replacing an existing regular file keeps that file's mode. Raises OSError when the
    directory is not writable, read-only (``EROFS``) or full (``ENOSPC``); the temporary is
    removed and the old file is left untouched."""
    path = Path(os.path.abspath(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise SymlinkRefused(errno.ELOOP, "is a symbolic link: refused, not written through", str(path))
    clean_stale_temps(path.parent, path.name)
    data = json.dumps({"fingerprint": fingerprint.digest, "payload": _jsonable(fingerprint.payload)},
                      sort_keys=True, indent=1).encode()
    tmp = path.with_name(f".{path.name}{TEMP_TAG}{_host()}-{os.getpid()}-{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 0o666)
    try:
        try:
            if st is not None and stat.S_ISREG(st.st_mode):
                os.fchmod(fd, stat.S_IMODE(st.st_mode))  # our own new file: no race, no umask change
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)  # rename(2) replaces a link at ``path`` itself, never its target
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


#: largest sidecar read (a real one is a few KiB): a bigger file is unreadable, never loaded whole
SIDECAR_MAX_BYTES = 1 << 20
_HEX = frozenset("0123456789abcdef")


def load_json_bytes(data: bytes) -> Any:
    """``json.loads`` of UTF-8 ``data``; raises ValueError for anything that is not a JSON document
    (bad UTF-8, bad JSON, nesting too deep for the parser: RecursionError becomes ValueError)."""
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def payload_problem(payload: Any) -> str | None:
    """Why ``payload`` is not a fingerprint payload, or None when it is one: a JSON object with
    ``argv`` (list of str), ``env`` (object of str -> str) and ``settings`` (object of str -> JSON
    value: str, number, bool, null, or a list of those), and nothing else."""
    if not isinstance(payload, dict):
        return f"payload is {type(payload).__name__}, not an object"
    extra = sorted(set(payload) - {"argv", "env", "settings"})
    if extra:
        return f"payload has unknown key(s) {extra}"
    argv = payload.get("argv")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return "payload.argv is not a list of strings"
    env = payload.get("env")
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        return "payload.env is not an object of strings"
    settings = payload.get("settings")
    if not isinstance(settings, dict):
        return "payload.settings is not an object"
    scalar = (str, int, float, bool, type(None))
    for key, value in settings.items():
        if not (isinstance(value, scalar) or (isinstance(value, list)
                                              and all(isinstance(v, scalar) for v in value))):
            return f"payload.settings[{key!r}] is {type(value).__name__} (a nested value)"
    return None


@dataclass(frozen=True)
class Sidecar:
    """A sidecar as read: digest ("" if unreadable), payload (None for the seed's one-hex-line
    format or an unreadable file; otherwise a payload ``payload_problem`` accepts), ``legacy``
    (True when written by the seed adapter) and ``error`` (``"<path>: <why>"`` when unreadable)."""

    digest: str
    payload: Mapping[str, Any] | None
    legacy: bool = False
    error: str = ""


def read_sidecar(path: os.PathLike | str) -> Sidecar:
    """Read a sidecar. Total: never raises, whatever the file holds or is.

    A missing file, a symbolic link (never followed), a FIFO / device / directory (never blocks:
    opened non-blocking, ``fstat``-checked), a file over ``SIDECAR_MAX_BYTES``, bad UTF-8, bad or
    too deeply nested JSON, or JSON that is not ``{"fingerprint": "<64 hex>", "payload": <payload>}``
    (``payload_problem``: every type inside checked) gives ``payload=None`` and ``error``; a
    seed-era file (one hex line) gives ``legacy=True`` and no payload (always a mismatch).
    Since issue 16 (adversarial review): deep validation, size cap, no symlink, non-blocking."""
    try:
        return _read_sidecar(path)
    except Exception as exc:  # last resort: a fault not foreseen above is still an answer
        return Sidecar("", None, error=f"{path}: unreadable ({type(exc).__name__}: {exc})")


def _read_sidecar(path: os.PathLike | str) -> Sidecar:
    try:
        data = read_regular(path, max_bytes=SIDECAR_MAX_BYTES, follow_symlinks=False)
    except OSError as exc:  # FileRefused: "<path> <why>"
        why = getattr(exc, "reason", None) or exc.strerror or str(exc)
        return Sidecar("", None, error=f"{path}: cannot read it: {why}")
    stripped = data.strip()
    if len(stripped) == 64 and set(stripped.decode("ascii", "replace")) <= _HEX:
        return Sidecar(stripped.decode("ascii"), None, legacy=True)
    expected = 'expected JSON {"fingerprint": "<64 hex>", "payload": {"argv", "env", "settings"}}'
    try:
        doc = load_json_bytes(data)
    except ValueError as exc:
        return Sidecar("", None, error=f"{path}: not a sidecar ({exc}; {expected})")
    if not isinstance(doc, dict):
        return Sidecar("", None, error=f"{path}: not a sidecar ({expected})")
    digest = doc.get("fingerprint")
    if not (isinstance(digest, str) and len(digest) == 64 and set(digest) <= _HEX):
        return Sidecar("", None, error=f"{path}: not a sidecar (fingerprint is not 64 hex; {expected})")
    problem = payload_problem(doc.get("payload"))
    if problem:
        return Sidecar("", None, error=f"{path}: not a sidecar ({problem}; {expected})")
    return Sidecar(digest, doc["payload"])


def matches(sidecar: Sidecar, fingerprint: Fingerprint) -> bool:
    """True when the sidecar was written by a launch with this fingerprint (never for legacy)."""
    return not sidecar.legacy and sidecar.payload is not None and sidecar.digest == fingerprint.digest


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict]:
    """Key-by-key differences between two payloads: ``[{"part", "key", "old", "new"}]`` where
    ``part`` is argv/env/settings and a missing side is None (argv compared as a whole).
    Meant for payloads ``payload_problem`` accepts (``read_sidecar`` returns no other); a part
    that is not of its type counts as empty, so it never raises over a payload's content."""
    old = old if isinstance(old, Mapping) else {}
    new = new if isinstance(new, Mapping) else {}
    changes = []
    seq = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731
    if seq(old.get("argv")) != seq(new.get("argv")):
        changes.append({"part": "argv", "key": "argv", "old": old.get("argv"), "new": new.get("argv")})
    for part in ("env", "settings"):
        a, b = old.get(part), new.get(part)
        a, b = (a if isinstance(a, Mapping) else {}), (b if isinstance(b, Mapping) else {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                changes.append({"part": part, "key": key, "old": a.get(key), "new": b.get(key)})
    return changes
