"""Secrecy: which names mark a secret, and how a secret's value is shown.

A name (a variable, a launch option, a flag or option key) marks a secret when the parts of one
of the secret names appear in it in order and side by side, parts being split at ``-``, ``_``,
``.`` and spaces, case ignored: ``password`` marks ``--ssl-keyfile-password``; ``api-key`` marks
``--api-key``, ``--admin-api-key``, ``WANDB_API_KEY`` and ``--api-key-file``; ``hf-token`` marks
``SGLANG_HF_TOKEN``. A bare ``key`` or ``token`` marks nothing: in an inference engine they name
kernel settings (``--kv-cache-dtype``, ``SGLANG_USE_AITER_FP8_PER_TOKEN``,
``--max-total-tokens``), which must stay in the fingerprint. The secret names add up from
``CORE_SECRETS``, the engine adapter's (``EngineFacts.secrets``) and the settings' own
(``secret_names`` in a settings file, ``DSV41_SECRET_NAMES``).

A secret never enters the fingerprint, the sidecar, the snapshot, an event, ``explain``,
``status`` or an error; where a value must be shown it is ``MASK``. Every stage from the
settings on reads the rule here.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from dsv41_flags.engines import EngineFacts, engine_facts

#: secret name (parts joined by ``-``) -> why, whatever the engine (see the module docstring)
CORE_SECRETS: dict[str, str] = {
    "password": "a password", "passwd": "a password", "passphrase": "a passphrase",
    "secret": "a secret", "secrets": "secrets", "credential": "a credential",
    "credentials": "credentials", "apikey": "an API key", "api-key": "an API key",
    "api-token": "an API token",
    "access-key": "an access key", "private-key": "a private key",
    "auth-token": "an access token", "access-token": "an access token",
    "bearer-token": "an access token", "session-token": "an access token",
    "refresh-token": "an access token", "id-token": "an identity token",
    # the framework's own key for set / status --url
    "dsv41-api-key": "the CLI's key for the live routes (DSV41_API_KEY)",
}
#: what a secret's value is shown as, where one must be shown
MASK = "***"
_PARTS = re.compile(r"[-_.\s]+")


def name_parts(name: str) -> tuple[str, ...]:
    """``name`` lower-cased and split at ``-``, ``_``, ``.`` and spaces, empty parts dropped:
    ``--ssl-keyfile-password`` -> ``("ssl", "keyfile", "password")``."""
    return tuple(p for p in _PARTS.split(str(name).lower()) if p)


def secret_names(resolution: Any = None, facts: EngineFacts | None = None, *,
                 extra: Iterable[str] = ()) -> dict[str, str]:
    """Every secret name -> who declared it: ``CORE_SECRETS``, the engine adapter's
    (``EngineFacts.secrets``), the settings' ``SECRET_NAMES`` (of ``resolution``, a
    ``Resolution``, when given) and ``extra`` (names read before a resolution exists)."""
    facts = engine_facts() if facts is None else facts
    out = {name: f"dsv41_flags: {why}" for name, why in CORE_SECRETS.items()}
    for name, why in getattr(facts, "secrets", {}).items():
        out.setdefault(name, f"engine default (shipped for {facts.engine}: {why})")
    names = list(getattr(resolution, "reserved", {}).get("SECRET_NAMES", ()) or ()) + list(extra)
    for name in names:
        out.setdefault(str(name), "settings secret_names")
    return out


def is_secret(name: str, secrets: Mapping[str, str] | None = None) -> str:
    """Why ``name`` (a variable, a launch option, a flag or option key) marks a secret: the
    secret name found in it and who declared it (``secrets``, default ``secret_names()``); ``""``
    when it marks none. See the module docstring for the rule."""
    secrets = secret_names() if secrets is None else secrets
    parts = name_parts(name)
    for secret, why in secrets.items():
        wanted = name_parts(secret)
        n = len(wanted)
        if n and any(parts[i:i + n] == wanted for i in range(len(parts) - n + 1)):
            return f"secret: the name holds {'-'.join(wanted)!r} ({why})"
    return ""


def masked_argv(argv: Sequence[str], secrets: Mapping[str, str] | None = None) -> list[str]:
    """``argv`` as it may be shown: the value of every option whose name marks a secret
    (``--api-key S`` and ``--api-key=S``) replaced by ``MASK``."""
    secrets = secret_names() if secrets is None else secrets
    out: list[str] = []
    hide_next = False
    for token in map(str, argv):
        if hide_next and not token.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        opt, eq, _ = token.partition("=")
        if opt.startswith("-") and len(opt) > 1 and is_secret(opt, secrets):
            if eq:
                token = f"{opt}={MASK}"
            else:
                hide_next = True
        out.append(token)
    return out


def mask(name: str, value: Any, secrets: Mapping[str, str] | None = None) -> Any:
    """``value``, or ``MASK`` when ``name`` marks a secret (``is_secret``)."""
    return MASK if is_secret(name, secrets) else value
