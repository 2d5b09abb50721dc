"""sglang plugin entry point (group ``sglang.srt.plugins``).

sglang 0.5.23 calls ``load_plugins()`` in the main process and at the start of every scheduler,
detokenizer and data-parallel controller process; each call lands here and activates the
framework once per process (a snapshot from the launching process is used when present).
"""
from __future__ import annotations


def load() -> None:
    """Activate dsv41_flags in this sglang process (idempotent). Errors propagate: in strict mode a
    drifted or failing armed feature stops the engine at boot, as the seeds did."""
    from . import activate

    activate(role=None)
