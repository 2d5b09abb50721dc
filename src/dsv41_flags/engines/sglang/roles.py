"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The role names of the sglang processes that no process entry function names (those are
``processes.PROCESS_ENTRIES``): read by ``processes`` (which gives them) and ``peers`` (which
counts them). Standard library only; imports nothing.
"""
from __future__ import annotations

#: the role of a process the ``dsv41-flags run`` bootstrap activated that sglang's plugin loader
#: never named (``activation``: not the launch process)
UNNAMED_ROLE = "child"
#: the role of a spawned child that serves sglang's HTTP app: a uvicorn worker of
#: ``--tokenizer-worker-num N`` (N > 1), which sglang's plugin loader never enters
TOKENIZER_WORKER = "tokenizer_worker"
