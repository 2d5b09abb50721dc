"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

sglang's CPU platform for a CPU-only machine, as an out-of-tree platform plugin (entry-point
group ``sglang.srt.platforms``, name ``dsv41_cpu``, selected with ``SGLANG_PLATFORM=dsv41_cpu``;
``dsv41-flags serve --cpu`` sets it).

sglang 0.5.23's in-tree ``CpuSRTPlatform`` says it can capture graphs and use PyNccl; declared
out of tree with those capabilities off, ``--tp 2`` no longer dies creating PyNccl and ``--tp 1``
no longer dies importing vllm, and layers dispatch to ``forward_native`` (no sgl_kernel needed).
sglang imports this module only when ``SGLANG_PLATFORM`` names the plugin (``dsv41_flags_plugin.
cpu_platform`` answers None otherwise, so an auto-discovering launch never selects it)."""
from __future__ import annotations

from sglang.srt.platforms.cpu import CpuSRTPlatform
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities


class CpuPlatform(CpuSRTPlatform):
    """``CpuSRTPlatform`` without graph capture and PyNccl; attention on ``torch_native``."""

    _enum = PlatformEnum.OOT
    capabilities = PlatformCapabilities(graph_capture=False, supports_pynccl=False)

    def get_default_attention_backend(self) -> str:
        return "torch_native"
