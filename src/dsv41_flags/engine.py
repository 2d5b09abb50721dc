"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The engine seam: ``EngineAdapter``, what the core may ask of the engine it patches. The core
never names an engine; each engine is one integration (a subpackage of ``dsv41_flags.engines``)
that builds an ``EngineAdapter`` and declares it in the entry-point group ``dsv41_flags.engines``
(pyproject): data and plain callables, the engine's facts and hook points. A second engine is
one new integration and one entry point: the activation policy (``activation.activate_plugin``)
is the core's, driven by the adapter.

Standard library only at import: every process imports this module.
"""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable, Mapping

from dsv41_flags.errors import FlagsError, SwitchError
from dsv41_flags.text import exception_text

#: entry-point group an engine integration's adapter is declared in (``name = "module:ADAPTER"``)
ENGINE_GROUP = "dsv41_flags.engines"
#: the distribution that ships the framework and its engine integrations
DISTRIBUTION = "dsv41-flags"


@dataclass(frozen=True)
class EngineFacts:
    """What an engine contributes to every launch fingerprint, declared by its adapter
    (``EngineAdapter.fingerprint``); an operator's ``[default.fingerprint]`` adds to it.

    engine: name and version the facts were read from (``"sglang 0.5.23"``), shown by ``--explain``;
    prefixes: variable prefix the engine reads -> why; volatile: variable or launch option
    (``--port``) that never changes a tuned kernel -> why; canonical_env: ``environ -> (env,
    notes)``, the variables renamed as the engine reads them (legacy spellings), with a note per
    renamed or overridden name; canonical_argv: ``argv -> (argv, notes)``, the launch command
    (``normalize_argv`` form) with the engine's own option spellings (aliases, abbreviations);
    secrets: secret name (parts joined by ``-``, e.g. ``api-key``) -> why: a variable or launch
    option whose name holds one is a secret, never kept (``secrecy.is_secret``); knows_options:
    ``argv -> bool`` (``normalize_argv`` form), True when ``canonical_argv`` spells every option
    of this program as the program reads it (the engine's own launchers): an option it leaves
    as written is then no abbreviation of another (``secrecy.option_is_secret``).
    """

    engine: str
    prefixes: Mapping[str, str]
    volatile: Mapping[str, str]
    secrets: Mapping[str, str] = field(default_factory=dict)
    canonical_env: Callable[[Mapping[str, str]], tuple[dict[str, str], dict[str, str]]] = \
        field(default=lambda environ: (dict(environ), {}))
    canonical_argv: Callable[[list[str]], tuple[list[str], dict[str, str]]] = \
        field(default=lambda argv: (list(argv), {}))
    knows_options: Callable[[list[str]], bool] = field(default=lambda argv: False)


#: no engine adapter: nothing contributed to the fingerprint
NO_FACTS = EngineFacts(engine="no engine adapter installed", prefixes={}, volatile={})


def _no_hook(arg: Any) -> bool:
    return False


def _no_live(*args: Any, **kwargs: Any) -> dict:
    raise SwitchError("the installed engine adapter offers no live switching path")


@dataclass(frozen=True)
class EngineAdapter:
    """One engine, as the core sees it.

    name: distribution name of the engine (``importlib.metadata.version(name)`` is its version;
      ``<name>-plugin`` is the ``entry`` of a ``flags.error`` raised under its plugin loader);
    default_range: requirement a feature without ``engine=`` gets (``"<name>>=1.2,<2"``; "" = no
      version check);
    fingerprint: ``EngineFacts`` (prefixes, volatile names, ``canonical_env``);
    process_context: ``() -> dict`` role and ranks of the calling engine process, e.g.
      ``{"role": "scheduler", "tp_rank": 0}``; ``{}`` when unknown;
    no_world_roles: roles whose processes never initialise the distributed world (no rank guard
      is registered there);
    on_world_ready: ``(callback) -> bool``: arrange ``callback(cpu_group)`` after the engine has
      initialised its distributed world; False when the engine offers no such hook here;
    arm_live: ``(runtime) -> bool``: arrange the live-switch transport (methods on the ranks,
      routes on the server) where the engine's modules are imported; False when armed already;
    on_serving: ``(runtime) -> bool``: arrange what this process reports once it starts serving;
      False when it never serves, or the hook is arranged already;
    will_activate: ``(target) -> bool``: True when a process about to run ``target`` activates
      through the engine's plugin loader (which knows its role and ranks);
    switch / status: ``(engine_object, name, value, *, requested_by, timeout_s) -> dict`` and
      ``(engine_object, *, timeout_s) -> dict``: live switching of an in-process engine object on
      every rank; remote_switch / remote_status: ``(url, name, value, requested_by, *, api_key,
      timeout_s) -> answer`` and ``(url, *, api_key, timeout_s) -> answer``: the same through the
      engine's running server, the answer as decoded JSON (``engines.http_client``). Default:
      SwitchError;
    server_command: ``(args, *, cpu) -> (argv, env)``: the command line of the engine's server
      with the operator's ``args`` (``dsv41-flags serve``; ``cpu``: on a CPU-only machine).
      Default: SwitchError;
    fleet_context: ``(argv) -> dict``: what the flag service's evaluation context says of a
      launch (``argv``: its command line): ``host``, ``port``, ``model_path``,
      ``served_model_name``, ``tp_size``, ``dp_size``, ``pp_size``, ``engine_version`` (keys
      the engine cannot tell are left out). Default: ``{}``.
      Every hook may raise; the core applies the error policy.
    """

    name: str
    default_range: str
    fingerprint: EngineFacts | None = None
    process_context: Callable[[], dict] = lambda: {}
    no_world_roles: frozenset[str] = frozenset()
    on_world_ready: Callable[[Callable[[Any], None]], bool] = _no_hook
    arm_live: Callable[[Any], bool] = _no_hook
    on_serving: Callable[[Any], bool] = _no_hook
    will_activate: Callable[[Any], bool] = lambda target: False
    switch: Callable[..., dict] = _no_live
    status: Callable[..., dict] = _no_live
    remote_switch: Callable[..., dict] = _no_live
    remote_status: Callable[..., dict] = _no_live
    server_command: Callable[..., tuple] = _no_live
    fleet_context: Callable[[list[str]], dict] = lambda argv: {}


#: no engine installed: no default range, no engine variables, no hook points
NO_ENGINE = EngineAdapter(name="", default_range="")


@cache
def adapter() -> EngineAdapter:
    """The engine adapter of this environment: the one declared in ``dsv41_flags.engines`` by this
    distribution (else by any installed one; the first by entry-point name when several are),
    else ``NO_ENGINE``. Looked up once per process
    (the installed distributions do not change under a running process).
    Raises FlagsError when a declared adapter cannot be loaded or is not an EngineAdapter."""
    try:  # this distribution's own integrations first: one metadata file, not a scan of all
        eps = list(importlib.metadata.distribution(DISTRIBUTION).entry_points.select(group=ENGINE_GROUP))
    except importlib.metadata.PackageNotFoundError:
        eps = []
    if not eps:  # any installed distribution's
        eps = list(importlib.metadata.entry_points(group=ENGINE_GROUP))
    eps = sorted(eps, key=lambda ep: ep.name)
    if not eps:
        return NO_ENGINE
    ep = eps[0]
    try:
        found = ep.load()
    except Exception as exc:
        raise FlagsError(f"engine adapter {ep.name} = {ep.value} (entry-point group {ENGINE_GROUP}) "
                         f"cannot be loaded: {exception_text(exc)}") from exc
    if not isinstance(found, EngineAdapter):
        raise FlagsError(f"engine adapter {ep.name} = {ep.value} (entry-point group {ENGINE_GROUP}) "
                         f"is a {type(found).__name__}, not an EngineAdapter")
    return found


def engine_facts() -> EngineFacts:
    """The engine adapter's fingerprint facts (``adapter().fingerprint``: the engine's integration
    is the one place that knows the engine); ``NO_FACTS`` without an engine adapter."""
    return adapter().fingerprint or NO_FACTS
