"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The command line of ``python -m sglang.launch_server`` that ``dsv41-flags serve`` starts: the
operator's own sglang options, passed through unchanged, plus, with ``cpu=True``, what serving
on a CPU-only machine needs (``docs/quickstart.md``).

With ``cpu=True``:

- the platform is ``dsv41_cpu`` (``SGLANG_PLATFORM``; ``cpu_platform.CpuPlatform``);
- each option of ``CPU_OPTIONS`` the operator did not give is added (the CPU device, the torch
  attention and sampling backends, no CUDA graph, no overlap schedule, no warm-up request);
- without ``--model-path``, the shipped tiny Llama configuration (``_data/tiny-llama``: hidden
  64, 2 layers, vocab 1000, float32) is served with dummy weights and no tokenizer, so nothing is
  downloaded;
- ``SGLANG_CPU_OMP_THREADS_BIND``, unless set, binds each local scheduler to one CPU of this
  process's affinity, in turn.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from dsv41_flags.errors import SwitchError
from dsv41_flags_plugin import CPU_PLATFORM

#: the shipped model directory: a tiny Llama ``config.json`` only (weights: ``--load-format dummy``)
TINY_MODEL = Path(__file__).resolve().parents[2] / "_data" / "tiny-llama"
#: ``(option, value or None for a switch)`` added on a CPU unless the operator gave the option
CPU_OPTIONS: tuple[tuple[str, str | None], ...] = (
    ("--device", "cpu"), ("--attention-backend", "torch_native"), ("--disable-cuda-graph", None),
    ("--sampling-backend", "pytorch"), ("--disable-overlap-schedule", None),
    ("--skip-server-warmup", None), ("--max-total-tokens", "4096"))
#: added on a CPU when the operator names no model
TINY_MODEL_OPTIONS: tuple[tuple[str, str | None], ...] = (
    ("--model-path", str(TINY_MODEL)), ("--load-format", "dummy"), ("--skip-tokenizer-init", None),
    ("--dtype", "float32"))
def canonical(option: str, table: dict[str, str]) -> str | None:
    """The option sglang's parser takes ``option`` for (``table``: every spelling -> its
    canonical one, ``facts.server_options``): the exact spelling, else the one option it is an
    unambiguous prefix of (argparse's abbreviations: ``--model-p`` is ``--model-path``); None
    for an option sglang does not have or an ambiguous prefix."""
    if option in table:
        return table[option]
    matches = {canonical for spelling, canonical in table.items() if spelling.startswith(option)}
    return matches.pop() if len(matches) == 1 else None


def _given(args: Sequence[str], table: dict[str, str]) -> dict[str, str | None]:
    """The options in ``args``, by their canonical spelling -> their value (``--x=v`` or
    ``--x v``; None for a switch or an option last on the line)."""
    found: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            nxt = args[i + 1] if i + 1 < len(args) else None
            value = nxt if nxt is not None and not nxt.startswith("--") else None
        found[canonical(name, table) or name] = value
    return found


def _local_schedulers(given: Mapping[str, str | None]) -> int:
    """Scheduler processes this launch starts on one node: tp x dp (tp with DP attention)."""
    def size(option: str) -> int:
        text = given.get(option) or "1"
        return int(text) if text.isdigit() and int(text) > 0 else 1
    tp, dp = size("--tp-size"), size("--dp-size")
    return tp if "--enable-dp-attention" in given else tp * dp


def server_command(args: Sequence[str], *, cpu: bool, environ: Mapping[str, str] | None = None,
                   python: str | None = None) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` of ``python -m sglang.launch_server`` with the operator's ``args`` (sglang
    options, in order and unchanged) and, with ``cpu``, the CPU additions of the module docstring.
    ``env`` is ``environ`` (default: this process's) with ``SGLANG_PLATFORM`` and
    ``SGLANG_CPU_OMP_THREADS_BIND`` set on a CPU. ``python`` defaults to this interpreter. An
    option counts as given in every spelling sglang's parser takes (aliases, abbreviations).
    Raises SwitchError (a FlagsError) for ``--cpu`` with ``--config`` or with
    ``SGLANG_PLATFORM`` naming another platform."""
    env = dict(os.environ if environ is None else environ)
    argv = [python or sys.executable, "-m", "sglang.launch_server", *args]
    if not cpu:
        return argv, env
    from dsv41_flags.engines.sglang.facts import server_options

    table = server_options()
    given = _given(args, table)
    if "--config" in given:
        raise SwitchError("--cpu with --config: the options a config file sets cannot be told "
                          "apart from the ones --cpu would add; give them on the command line, "
                          "or leave out --cpu")
    platform = env.get("SGLANG_PLATFORM", "").strip()
    if platform and platform != CPU_PLATFORM:
        raise SwitchError(f"--cpu selects the platform {CPU_PLATFORM}, but SGLANG_PLATFORM="
                          f"{platform!r} names another: unset it, or leave out --cpu")
    extra = (() if "--model-path" in given else TINY_MODEL_OPTIONS) + CPU_OPTIONS
    for opt, val in extra:
        if opt not in given:
            argv += [opt] if val is None else [opt, val]
    env["SGLANG_PLATFORM"] = CPU_PLATFORM
    if not env.get("SGLANG_CPU_OMP_THREADS_BIND"):
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(
            str(cores[i % len(cores)]) for i in range(_local_schedulers(given)))
    return argv, env


def fleet_context(argv: Sequence[str]) -> dict:
    """What the flag service's evaluation context says of the launch ``argv`` (any command line
    carrying sglang's server options: ``sglang.launch_server``, ``sglang serve``, ``dsv41-flags
    serve``; see ``EngineAdapter.fleet_context``): ``host`` and ``port`` (sglang's defaults
    127.0.0.1 and 30000 when not given), ``model_path``, ``served_model_name`` (the model path
    when not given), ``tp_size``, ``dp_size``, ``pp_size`` (1 when not given, ints) and
    ``engine_version`` (the installed sglang)."""
    from importlib.metadata import PackageNotFoundError, version

    from dsv41_flags.engines.sglang.facts import DISTRIBUTION, server_options

    given = _given(list(argv), server_options())

    def size(option: str) -> int:
        text = given.get(option) or "1"
        return int(text) if text.isdigit() and int(text) > 0 else 1

    try:
        engine = version(DISTRIBUTION)
    except PackageNotFoundError:
        engine = ""
    model = given.get("--model-path") or ""
    return {"host": given.get("--host") or "127.0.0.1", "port": given.get("--port") or "30000",
            "model_path": model, "served_model_name": given.get("--served-model-name") or model,
            "tp_size": size("--tp-size"), "dp_size": size("--dp-size"),
            "pp_size": size("--pp-size"), "engine_version": engine}
