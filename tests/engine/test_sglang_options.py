"""The option table the fingerprint uses (``_sglang.server_options``, shipped as data for the
supported release) is the real parser's: every option string of ``ServerArgs.add_cli_args`` and the
option it stands for (issue 15: aliases and abbreviations hashed as their option). A release bump
fails here until the table is regenerated (``_sglang.write_server_options()``)."""
from __future__ import annotations

import argparse
import importlib.metadata

import pytest

pytestmark = pytest.mark.engine


def test_shipped_option_table_is_the_installed_sglang_parser():
    from sglang.srt.server_args import ServerArgs

    from dsv41_flags.engines.sglang import (canonical_argv, live_server_options, server_options,
                                     server_options_release)

    assert server_options_release() == f"sglang {importlib.metadata.version('sglang')}" == "sglang 0.5.23"
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    live = {}
    for option, action in parser._option_string_actions.items():
        if not option.startswith("--") or option == "--help":
            continue
        # BooleanOptionalAction registers --x and --no-x on one action: each keeps its meaning
        negative = option.startswith("--no-") and isinstance(action, argparse.BooleanOptionalAction)
        live[option] = option if negative else action.option_strings[0]
    assert server_options() == live == live_server_options()
    # what the parser makes of abbreviations, the fingerprint makes too
    for abbrev in ("--tp", "--node-r", "--model-p", "--dist-init"):
        extra = [] if abbrev == "--model-p" else ["--model-path", "m"]  # a required option
        ns = parser.parse_known_args(extra + [abbrev, "1"])[0]
        spelled = canonical_argv(["sglang.launch_server", abbrev, "1"])[0][1]
        dest = parser._option_string_actions[spelled].dest
        assert str(getattr(ns, dest)) == "1", (abbrev, spelled)
