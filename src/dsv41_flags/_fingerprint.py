"""Launch fingerprint: sha256 over what makes two launches "the same" for caches.

Payload (canonical JSON, sorted keys, no whitespace):
  ``argv``: the command line as ``[program, *args]`` (see ``normalize_argv``: the same whether
  typed after ``dsv41-flags run --`` or read from ``sys.argv``) without volatile options
  (``--port 30000`` / ``--port=30000``);
  ``env``: variables with a configured prefix that are neither volatile, nor reserved, nor the
  variable of a flag or option (those enter by resolved value, below);
  ``settings``: resolved value of every non-volatile flag and option, whatever its source.
Volatile names come from settings (``fingerprint.volatile`` / ``volatile_argv``, profile
sections add to ``[default]``) and from feature declarations (``volatile=``, ``Option(volatile=)``).
Source: seed autotune_keep.py ``launch_fingerprint`` (sglang#40320 context).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ._declare import ENV_PREFIX, RESERVED_KEYS, Feature
from ._settings import Resolution, _jsonable

SIDECAR_SUFFIX = ".launch"


@dataclass(frozen=True)
class Fingerprint:
    """A launch fingerprint.

    digest: 64 hex chars (sha256 of the canonical payload); payload: ``{"argv": [str],
    "env": {str: str}, "settings": {KEY: value}}``; excluded: name -> why it was left out
    (who declared it volatile, or "reserved", or "enters by resolved value").
    """

    digest: str
    payload: Mapping[str, Any]
    excluded: Mapping[str, str]

    def to_dict(self) -> dict:
        """JSON-ready dict (``digest``, ``payload``, ``excluded``) for the snapshot."""
        return {"digest": self.digest, "payload": dict(self.payload), "excluded": dict(self.excluded)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Fingerprint":
        """Inverse of ``to_dict``. Raises KeyError when ``digest`` or ``payload`` is missing."""
        return cls(d["digest"], d["payload"], d.get("excluded", {}))


def canonical(payload: Mapping[str, Any]) -> bytes:
    """Canonical JSON bytes of a payload: sorted keys, compact separators, UTF-8."""
    return json.dumps(_jsonable(payload), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True).encode()


def volatile_names(resolution: Resolution, features: Sequence[Feature]) -> dict[str, str]:
    """Every volatile name (variable or argv option) -> who declared it volatile."""
    names = dict(resolution.volatile_sources)
    for feature in features:
        for name in feature.volatile:
            names.setdefault(name, f"feature {feature.name}")
        for option in feature.options:
            if option.volatile:
                names.setdefault(ENV_PREFIX + feature.option_key(option), f"feature {feature.name} "
                                 f"(option {option.name})")
    return names


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """The launch command as ``[program, *args]`` whoever wrote it: ``python -m sglang.launch_server
    --tp 4`` (as typed after ``dsv41-flags run --``) and ``sys.argv`` of that process
    (``[".../site-packages/sglang/launch_server.py", "--tp", "4"]``) both give
    ``["sglang.launch_server", "--tp", "4"]``. Interpreter options before ``-m``/script are dropped
    and ``--opt=value`` is spelled ``--opt value``."""
    argv = [str(a) for a in argv]
    if not argv:
        return []
    if Path(argv[0]).name.startswith("python"):
        i = 1
        while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c", "-"):
            i += 2 if argv[i] in ("-X", "-W", "-Q") else 1
        if i >= len(argv):
            return ["python"]
        if argv[i] in ("-m", "-c") and i + 1 < len(argv):
            return [argv[i + 1] if argv[i] == "-m" else "-c"] + _split_eq(argv[i + 2:])
        return [_program(argv[i])] + _split_eq(argv[i + 1:])
    return [_program(argv[0])] + _split_eq(argv[1:])


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
            environ: Mapping[str, str]) -> Fingerprint:
    """Compute the launch fingerprint of this launch. Pure function of its inputs."""
    cfg = resolution.reserved.get("FINGERPRINT", {})
    prefixes = tuple(cfg.get("prefixes", ()))
    volatile = volatile_names(resolution, features)
    volatile_argv = {n for n in volatile if n.startswith("-")} | set(cfg.get("volatile_argv", ()))
    excluded: dict[str, str] = {}
    argv_part = _strip_argv(normalize_argv(argv), volatile_argv, excluded, volatile)

    setting_vars = {ENV_PREFIX + k for k in resolution.values}
    reserved_vars = {ENV_PREFIX + k for k in RESERVED_KEYS}
    env_part = {}
    for name in sorted(environ):
        if not name.startswith(prefixes):
            continue
        if name in volatile:
            excluded[name] = volatile[name]
        elif name in reserved_vars or name.split("__")[0] in reserved_vars:
            excluded[name] = "reserved name of dsv41_flags"
        elif name in setting_vars:
            excluded[name] = "enters by resolved value (settings)"
        else:
            env_part[name] = environ[name]
    settings_part = {}
    for key, resolved in sorted(resolution.values.items()):
        if ENV_PREFIX + key in volatile:
            excluded.setdefault(key, volatile[ENV_PREFIX + key])
        else:
            settings_part[key] = resolved.value
    payload = {"argv": argv_part, "env": env_part, "settings": _jsonable(settings_part)}
    return Fingerprint(hashlib.sha256(canonical(payload)).hexdigest(), payload, excluded)


# ------------------------------------------------------------------------------- sidecar
def sidecar_path(cache_path: os.PathLike | str) -> Path:
    """Sidecar beside a cache file: ``x.json`` -> ``x.launch`` (seed autotune_keep.py)."""
    return Path(cache_path).with_suffix(SIDECAR_SUFFIX)


def write_sidecar(path: os.PathLike | str, fingerprint: Fingerprint) -> Path:
    """Write ``{"fingerprint", "payload"}`` JSON to ``path`` atomically (temporary file in the same
    directory, fsync, rename): readers see the old file or the new one, never half of one.
    Raises OSError when the directory is not writable (the temporary file is removed)."""
    path = Path(path).resolve()  # through a symlink: write the file it points to
    data = json.dumps({"fingerprint": fingerprint.digest, "payload": _jsonable(fingerprint.payload)},
                      sort_keys=True, indent=1).encode()
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600: keep the old file's mode, else the umask's
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@dataclass(frozen=True)
class Sidecar:
    """A sidecar as read: digest ("" if unreadable), payload (None for the seed's one-hex-line
    format or an unreadable file) and ``legacy`` (True when written by the seed adapter)."""

    digest: str
    payload: Mapping[str, Any] | None
    legacy: bool = False
    error: str = ""


def read_sidecar(path: os.PathLike | str) -> Sidecar:
    """Read a sidecar. Never raises for content: a missing or malformed file gives ``error``;
    a seed-era file (one hex line) gives ``legacy=True`` and no payload (always a mismatch)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return Sidecar("", None, error=f"{path}: cannot read it: {exc.strerror or exc}")
    except UnicodeDecodeError:
        return Sidecar("", None, error=f"{path}: not a sidecar (not UTF-8 text)")
    stripped = text.strip()
    if len(stripped) == 64 and all(c in "0123456789abcdef" for c in stripped):
        return Sidecar(stripped, None, legacy=True)
    expected = 'expected JSON {"fingerprint": "<64 hex>", "payload": {"argv", "env", "settings"}}'
    try:
        data = json.loads(text)
    except ValueError:
        return Sidecar("", None, error=f"{path}: not a sidecar (not JSON; {expected})")
    if not (isinstance(data, dict) and isinstance(data.get("fingerprint"), str)
            and isinstance(data.get("payload"), dict)):
        return Sidecar("", None, error=f"{path}: not a sidecar ({expected})")
    return Sidecar(data["fingerprint"], data["payload"])


def matches(sidecar: Sidecar, fingerprint: Fingerprint) -> bool:
    """True when the sidecar was written by a launch with this fingerprint (never for legacy)."""
    return not sidecar.legacy and sidecar.payload is not None and sidecar.digest == fingerprint.digest


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict]:
    """Key-by-key differences between two payloads: ``[{"part", "key", "old", "new"}]`` where
    ``part`` is argv/env/settings and a missing side is None (argv compared as a whole)."""
    changes = []
    if list(old.get("argv", [])) != list(new.get("argv", [])):
        changes.append({"part": "argv", "key": "argv", "old": old.get("argv"), "new": new.get("argv")})
    for part in ("env", "settings"):
        a, b = old.get(part, {}) or {}, new.get(part, {}) or {}
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                changes.append({"part": part, "key": key, "old": a.get(key), "new": b.get(key)})
    return changes
