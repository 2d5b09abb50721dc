"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Launch fingerprint: sha256 over what makes two launches "the same" for caches.

Payload (canonical JSON, sorted keys, no whitespace):
  ``argv``: the command line as ``[program, *args]`` (see ``normalize_argv``: the same whether
  typed after ``dsv41-flags run --`` or read from ``sys.argv``) without volatile options
  (``--port 30000`` / ``--port=30000``);
  ``env``: variables under a prefix (the engine's, ``DSV41_``, the settings') that are neither
  volatile, nor reserved, nor a fleet setting (``DSV41_FLEET_*``: like the ``fleet`` table, they
  say where values come from), nor the variable of a flag or option (those enter by resolved
  value, below), renamed as the engine reads them (legacy spellings, ``EngineFacts.canonical_env``);
  ``settings``: resolved value of every non-volatile flag and option, whatever its source.
Prefixes and volatile names add up from three places: the engine adapter's defaults
(``EngineAdapter.fingerprint``), the settings (``fingerprint.prefixes`` / ``volatile`` /
``volatile_argv``, profile sections add to ``[default]``) and the feature declarations
(``volatile=``, ``Option(volatile=)``); ``Fingerprint.excluded`` / ``included`` say which one
decided each key.
Secrets are volatile and more: a variable, launch option or flag/option key whose name marks a
secret (``secrecy.is_secret``, where the rule is stated) never enters the payload, whatever the
other lists say, and ``excluded`` names it without its value.
Source: the launch fingerprint of the sglang#40320 workaround (a cache kept for the same launch).
"""

import hashlib
import itertools
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from dsv41_flags.declare import Feature
from dsv41_flags.engine import EngineFacts, engine_facts
from dsv41_flags.names import ENV_PREFIX, FLEET_VARIABLE_PREFIX, RESERVED_KEYS, suggest
from dsv41_flags.errors import DeclarationError
from dsv41_flags.resolution import EMPTY, Resolution
from dsv41_flags.wire import dumps, jsonable
from dsv41_flags.secrecy import MASK, is_secret, option_is_secret, secret_names

#: the framework's own variables always enter (by resolved value for flags and options)
CORE_PREFIXES = {ENV_PREFIX: "dsv41_flags: its own variables"}






class Fingerprint(NamedTuple):
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
    included: Mapping[str, str] = EMPTY


_HEX_DIGITS = frozenset("0123456789abcdef")


def is_sha256(text: object) -> bool:
    """True when ``text`` is a str of 64 lower-case hex digits (a sha256 as written here)."""
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX_DIGITS


def canonical(payload: Mapping[str, Any]) -> bytes:
    """Canonical JSON bytes of a payload (``wire.dumps``: sorted keys, compact separators, ASCII)."""
    return dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def volatile_names(resolution: Resolution, features: Sequence[Feature],
                   facts: "EngineFacts | None" = None) -> dict[str, str]:
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


def prefix_sources(resolution: Resolution, facts: "EngineFacts | None" = None) -> dict[str, str]:
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


def check_volatile_declarations(features: Sequence[Feature], facts: "EngineFacts | None" = None) -> None:
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


def _strip_argv(argv: Sequence[str], volatile_argv: set[str], excluded: dict, volatile: dict,
                secrets: Mapping[str, str] | None = None, known: bool = False) -> list[str]:
    """``argv`` without its volatile options and their values, nor any option that holds a
    secret (``secrecy.option_is_secret``; ``known``: the engine spelled every option in full, so
    none is taken for an abbreviation), nor that option's value. Each one left out is named in
    ``excluded``."""
    out: list[str] = []
    skip_next = False
    for token in argv:
        if skip_next:
            skip_next = False
            if not token.startswith("-"):
                continue
        opt = token.split("=", 1)[0]
        secret = option_is_secret(opt, secrets, abbreviation=not known) \
            if opt.startswith("-") and secrets is not None else ""
        if opt in volatile_argv or secret:
            excluded[opt] = secret or volatile.get(opt, "settings fingerprint.volatile_argv")
            skip_next = "=" not in token
            continue
        out.append(token)
    return out


def masked_argv(argv: Sequence[str], secrets: Mapping[str, str] | None = None,
                facts: "EngineFacts | None" = None) -> list[str]:
    """``argv`` as it may be shown: the value of every option that holds a secret (``--api-key S``
    and ``--api-key=S``) replaced by ``MASK``. An option is judged as the program reads it: the
    engine's launchers by their own spelling (``EngineFacts.canonical_argv``: ``--admin-api`` is
    ``--admin-api-key``), any other program with abbreviations guessed
    (``secrecy.option_is_secret``)."""
    facts = engine_facts() if facts is None else facts
    secrets = secret_names(facts=facts) if secrets is None else secrets
    try:
        normalized = normalize_argv(argv)
        known = bool(facts.knows_options(normalized))
    except Exception:  # noqa: BLE001 - an argv it cannot read: guess, never show a secret
        normalized, known = list(argv), False
    head = list(itertools.takewhile(lambda t: not t.startswith("-"), normalized))
    out: list[str] = []
    hide_next = False
    for token in map(str, argv):
        if hide_next and not token.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        opt, eq, _ = token.partition("=")
        if opt.startswith("-") and len(opt) > 1:
            spelled = facts.canonical_argv(head + [opt])[0][-1] if known else opt
            if option_is_secret(spelled, secrets, abbreviation=not known):
                if eq:
                    token = f"{opt}={MASK}"
                else:
                    hide_next = True
        out.append(token)
    return out


def compute(resolution: Resolution, features: Sequence[Feature], argv: Sequence[str],
            environ: Mapping[str, str], facts: "EngineFacts | None" = None) -> Fingerprint:
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
    secrets = secret_names(resolution, facts)
    known = bool(facts.knows_options(normalize_argv(argv)))
    argv_part = _strip_argv(spelled, volatile_argv, excluded, volatile, secrets, known)
    if argv_notes:
        included["argv"] += "; " + "; ".join(f"{k}: {v}" for k, v in sorted(argv_notes.items()))

    setting_vars = {ENV_PREFIX + k for k in resolution.values}
    reserved_vars = {ENV_PREFIX + k for k in RESERVED_KEYS}
    ordered = sorted(prefixes, key=len, reverse=True)  # the longest prefix explains a name
    selected = {k: v for k, v in environ.items() if k.startswith(tuple(ordered))}
    env, notes = facts.canonical_env(selected)
    for name, note in notes.items():
        if name not in env:
            excluded[name] = is_secret(name, secrets) or note
    env_part = {}
    for name in sorted(env):
        prefix = next((p for p in ordered if name.startswith(p)), None)
        if prefix is None:
            continue
        secret = is_secret(name, secrets)
        if secret:
            excluded[name] = secret
        elif name in volatile:
            excluded[name] = volatile[name]
        elif name in reserved_vars or name.split("__")[0] in reserved_vars:
            excluded[name] = "reserved name of dsv41_flags"
        elif name.startswith(FLEET_VARIABLE_PREFIX):   # an unknown one is a settings error
            excluded[name] = ("fleet setting (where live values come from, like [default.fleet]): "
                              "the values it brings enter by resolved value")
        elif name in setting_vars:
            excluded[name] = "enters by resolved value (settings)"
        else:
            env_part[name] = env[name]
            included[name] = f"prefix {prefix}: {prefixes[prefix]}" + (
                f"; {notes[name]}" if name in notes else "")
    settings_part = {}
    for key, resolved in sorted(resolution.values.items()):
        secret = is_secret(key, secrets)
        if secret:
            excluded.setdefault(key, secret)
        elif ENV_PREFIX + key in volatile:
            excluded.setdefault(key, volatile[ENV_PREFIX + key])
        else:
            settings_part[key] = resolved.value
            what = f"option {resolved.option}" if resolved.option else "flag"
            included[key] = (f"{what} of feature {resolved.feature} (not declared volatile), "
                             f"resolved from {resolved.source}")
    payload = {"argv": argv_part, "env": env_part, "settings": jsonable(settings_part)}
    return Fingerprint(hashlib.sha256(canonical(payload)).hexdigest(), payload, excluded, included)
