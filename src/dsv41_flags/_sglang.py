"""The engine adapter room: everything dsv41_flags knows about sglang, declared once.

Core modules do not name the engine; they take its facts from here. This part holds what the
engine contributes to the launch fingerprint (``FINGERPRINT``), read from sglang 0.5.23's source:

- **Prefixes the engine reads**: ``SGLANG_`` (every ``Envs`` field of ``sglang/srt/environ.py``),
  the legacy ``SGL_`` spelling (aliased, below) and ``NCCL_`` (read by NCCL under
  torch.distributed; sglang sets several of them itself in ``entrypoints/engine.py``
  ``_set_envs_and_config``).
- **Aliasing** (``canonical_env``): ``environ.py`` ``_handle_deprecated_envs`` copies every
  ``SGL_<X>`` to ``SGLANG_<X>`` at import, overwriting a ``SGLANG_<X>`` already set, so the
  legacy spelling wins when both are set; the ``Env*WithAlias`` fields read their deprecated name
  only when the canonical one is unset, so there the canonical name wins. The fingerprint hashes
  the value the engine will read, under the canonical name: ``SGL_X=1`` and ``SGLANG_X=1`` give
  the same fingerprint, ``SGL_X=0`` and ``SGL_X=1`` differ.
- **Volatile variables**: ``SGLANG_RUN_ID`` (written fresh by ``_set_envs_and_config`` on every
  launch), and the variables that differ between the nodes or processes of one launch, or from
  restart to restart, without changing a kernel (ports, addresses, ranks).
- **Volatile launch options** (``server_args`` fields, ``arg_groups/fields/*.py``): the HTTP
  ``--host`` / ``--port``, the rendezvous (``--dist-init-addr`` alias ``--nccl-init-addr``,
  ``--nccl-port``, ``--node-rank``), and the other ports and addresses of one node (gRPC, sidecar,
  bootstrap servers, gated launch, remote weight loader). ``--nnodes`` and every size stay in: the
  nodes of one launch agree on them.

An operator's ``[default.fingerprint]`` table adds to these; it never has to repeat them.
"""
from __future__ import annotations

from typing import Mapping

from ._fingerprint import EngineFacts

ENGINE = "sglang 0.5.23"
_ENV_SRC = "sglang/srt/environ.py"
_ARGS_SRC = "sglang server_args (arg_groups/fields)"

#: prefix -> why the engine reads it
ENV_PREFIXES: dict[str, str] = {
    "SGLANG_": f"{_ENV_SRC}: every engine variable",
    "SGL_": f"{_ENV_SRC} _handle_deprecated_envs: legacy spelling, copied to SGLANG_<X>",
    "NCCL_": "read by NCCL (torch.distributed); sglang sets some itself (_set_envs_and_config)",
}

#: variable -> why it never changes a tuned kernel
VOLATILE_ENV: dict[str, str] = {
    "SGLANG_RUN_ID": "rewritten with a fresh value on every launch (entrypoints/engine.py "
                     "_set_envs_and_config)",
    "SGLANG_DP_RANK": "differs between the processes of one launch (data-parallel rank)",
    "SGLANG_IS_FIRST_RANK_ON_NODE": "differs between the nodes of one launch",
    "SGLANG_ZMQ_SOURCE_IP": "address of this node (IPC connects)",
    "SGLANG_PORT": "base port for ephemeral sockets",
    "SGLANG_BACKUP_PORT_BASE": "base port for ephemeral sockets",
    "SGLANG_TCP_STORE_PORT": "rendezvous port",
    "SGLANG_GRPC_PORT": "port of the gRPC server",
    "SGLANG_ZBAL_BOOTSTRAP_URL": "rendezvous address",
    # NCCL names this node's network devices and host: they may differ between the nodes of one
    # launch (NIC names, HCA lists) without changing a tuned kernel
    "NCCL_SOCKET_IFNAME": "network interface of this node (NCCL)",
    "NCCL_IB_HCA": "InfiniBand adapters of this node (NCCL)",
    "NCCL_HOSTID": "host identity of this node (NCCL)",
    "NCCL_DEBUG_FILE": "log file of this node (NCCL)",
}

#: launch option -> why it never changes a tuned kernel (aliases listed as their own entries)
VOLATILE_ARGV: dict[str, str] = {
    "--host": "HTTP server address",
    "--port": "HTTP server port",
    "--node-rank": "differs between the nodes of one launch",
    "--dist-init-addr": "rendezvous address (differs from restart to restart)",
    "--nccl-init-addr": "rendezvous address (alias of --dist-init-addr)",
    "--nccl-port": "rendezvous port (random by default)",
    "--gated-launch-port": "port of the gated launch server",
    "--grpc-port": "port of the gRPC server",
    "--smg-http-sidecar-port": "port of the HTTP sidecar",
    "--grpc-http-sidecar-port": "port of the HTTP sidecar (alias)",
    "--disaggregation-bootstrap-port": "port of the bootstrap server",
    "--encoder-bootstrap-port": "port of the encoder bootstrap server",
    "--engine-info-bootstrap-port": "port of the engine info bootstrap server",
    "--encoder-urls": "addresses of encoder servers",
    "--encoder-register-urls": "addresses of encoder bootstrap servers",
    "--remote-instance-weight-loader-seed-instance-ip": "address of the weight seed instance",
    "--remote-instance-weight-loader-seed-instance-service-port": "port of the weight seed instance",
    "--remote-instance-weight-loader-send-weights-group-ports": "ports of the weight transfer group",
    "--forward-pass-metrics-ipc-name": "IPC socket name",
}

#: deprecated name -> canonical name, read only when the canonical one is unset
#: (``Env*WithAlias(deprecated_name=...)`` fields of environ.py)
FIELD_ALIASES: dict[str, str] = {
    "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW": "SGLANG_OPT_RELEASE_PREFILL_SWA",
    "SGLANG_AITER_MLA_DCP_DECODE_BACKEND": "SGLANG_AITER_MLA_DECODE_BACKEND",
    "SGLANG_EPLB_ROCM_P2P_BATCH_CHUNK_SIZE": "SGLANG_EPLB_P2P_BATCH_CHUNK_SIZE",
    "SGLANG_USE_TRITON_ROUTER_SUM": "SGLANG_USE_CUSTOM_ROUTER_SUM",
}


def canonical_env(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The variables as the engine will read them, under their canonical names.

    Returns ``(env, notes)``: ``env`` is ``environ`` with every ``SGL_<X>`` renamed ``SGLANG_<X>``
    (its value wins over a ``SGLANG_<X>`` also set, as ``_handle_deprecated_envs`` overwrites it)
    and every deprecated field alias renamed to its field (the canonical value wins when both are
    set); ``notes`` maps each renamed or overridden name to a sentence saying what happened.
    Pure function; ``environ`` is not modified.
    """
    env = dict(environ)
    notes: dict[str, str] = {}
    for name in sorted(environ):
        if name.startswith("SGL_"):
            canon = "SGLANG_" + name[len("SGL_"):]
            if canon in environ and environ[canon] != environ[name]:
                notes[canon] = (f"set to {environ[canon]!r} but overridden by {name}={environ[name]!r} "
                                f"(the engine copies SGL_<X> over SGLANG_<X>: {_ENV_SRC} "
                                f"_handle_deprecated_envs)")
            env[canon] = environ[name]
            del env[name]
            notes[name] = f"legacy spelling: enters as {canon} ({_ENV_SRC} _handle_deprecated_envs)"
    for old, canon in FIELD_ALIASES.items():
        if old in env:
            value = env.pop(old)
            if canon in env:
                notes[old] = f"deprecated alias of {canon}, which is set and wins ({_ENV_SRC})"
            else:
                env[canon] = value
                notes[old] = f"deprecated alias: enters as {canon} ({_ENV_SRC})"
    return env, notes


FINGERPRINT = EngineFacts(
    engine=ENGINE,
    prefixes=ENV_PREFIXES,
    volatile={**VOLATILE_ENV, **VOLATILE_ARGV},
    canonical_env=canonical_env,
)
