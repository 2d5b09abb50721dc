"""The option table the fingerprint uses (``facts.server_options``, shipped as data for the
supported release) is the real parser's: every option string of ``ServerArgs.add_cli_args`` and the
option it stands for (aliases and abbreviations hashed as their option). A release bump
fails here until the table is regenerated (``facts.write_server_options()``)."""
from __future__ import annotations

import argparse
import importlib.metadata

import pytest

pytestmark = pytest.mark.engine


def test_shipped_option_table_is_the_installed_sglang_parser():
    from sglang.srt.server_args import ServerArgs

    from dsv41_flags.engines.sglang.facts import (canonical_argv, live_server_options, server_options,
                                                  server_options_release)

    assert server_options_release() == f"sglang {importlib.metadata.version('sglang')}" == "sglang 0.5.23"
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    live = live_server_options()
    assert server_options() == live
    # what the parser makes of aliases and abbreviations, the fingerprint makes too
    for short in ("--tp", "--node-r", "--model-p", "--dist-init", "--tensor-parallel-size"):
        extra = [] if short == "--model-p" else ["--model-path", "m"]  # a required option
        spelled = canonical_argv(["sglang.launch_server", short, "1"])[0][1]
        assert spelled != short or short in live
        as_typed = parser.parse_known_args(extra + [short, "1"])
        as_spelled = parser.parse_known_args(extra + [spelled, "1"])
        assert as_typed == as_spelled and as_typed[1] == [], (short, spelled)
