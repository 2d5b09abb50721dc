"""``dsv41-flags serve``'s command line (``engines/sglang/launch_server.py``): the operator's sglang
options pass through unchanged; ``cpu=True`` adds only what the operator did not give. The real
boot is in the server tier (``tests/server/test_server_launch.py``)."""
import json
import sys

from dsv41_flags.engines.sglang.launch_server import CPU_OPTIONS, TINY_MODEL, server_command
from dsv41_flags_plugin import CPU_PLATFORM, cpu_platform


def test_without_cpu_the_command_is_sglangs_own_with_the_operators_options():
    argv, env = server_command(["--model-path", "/m", "--tp", "2"], cpu=False, environ={"A": "1"})
    assert argv == [sys.executable, "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "2"]
    assert env == {"A": "1"}


def test_cpu_adds_the_platform_the_options_and_the_tiny_model():
    argv, env = server_command(["--tp", "2", "--port", "30001"], cpu=True, environ={})
    assert argv[3:7] == ["--tp", "2", "--port", "30001"]
    assert argv[argv.index("--model-path") + 1] == str(TINY_MODEL)
    assert json.loads((TINY_MODEL / "config.json").read_text())["model_type"] == "llama"
    for option, value in CPU_OPTIONS:
        assert option in argv and (value is None or argv[argv.index(option) + 1] == value)
    assert env["SGLANG_PLATFORM"] == CPU_PLATFORM
    assert len(env["SGLANG_CPU_OMP_THREADS_BIND"].split("|")) == 2   # one CPU per scheduler


def test_an_option_the_operator_gave_is_never_added_again_in_any_spelling():
    argv, env = server_command(["--model=/real", "--device=cpu", "--tp-size", "1", "--dp-size", "2",
                                "--attention-backend", "triton"], cpu=True,
                               environ={"SGLANG_CPU_OMP_THREADS_BIND": "3"})
    assert "--model-path" not in argv and "--load-format" not in argv
    assert argv.count("--attention-backend") == 1 and "--device" not in argv   # "--device=cpu" kept
    assert env["SGLANG_CPU_OMP_THREADS_BIND"] == "3"          # the operator's binding is kept


def test_the_platform_plugin_answers_only_when_selected(monkeypatch):
    """sglang calls every platform plugin's ``activate`` when ``SGLANG_PLATFORM`` is unset: this one
    must then answer None, or a GPU launch would pick the CPU platform."""
    monkeypatch.delenv("SGLANG_PLATFORM", raising=False)
    assert cpu_platform() is None
    monkeypatch.setenv("SGLANG_PLATFORM", "cuda_oot")
    assert cpu_platform() is None
    monkeypatch.setenv("SGLANG_PLATFORM", CPU_PLATFORM)
    assert cpu_platform() == "dsv41_flags.engines.sglang.cpu_platform:CpuPlatform"


def test_an_option_given_abbreviated_counts_as_given_as_sglangs_parser_reads_it():
    """argparse takes ``--model-p`` for ``--model-path`` and ``--dev`` for ``--device``: neither
    the tiny model nor ``--device cpu`` may be added after them (the last value would win)."""
    argv, _ = server_command(["--model-p", "/my/model", "--dev", "cuda"], cpu=True, environ={})
    assert str(TINY_MODEL) not in argv and "--load-format" not in argv
    assert "--device" not in argv and argv.count("--dev") == 1


def test_cpu_refuses_what_it_cannot_read_or_would_override():
    import pytest

    from dsv41_flags.errors import FlagsError

    with pytest.raises(FlagsError, match="--config"):
        server_command(["--config", "c.yaml"], cpu=True, environ={})
    with pytest.raises(FlagsError, match="SGLANG_PLATFORM='my_npu'"):
        server_command(["--tp", "1"], cpu=True, environ={"SGLANG_PLATFORM": "my_npu"})
    argv, env = server_command(["--tp", "1"], cpu=True, environ={"SGLANG_PLATFORM": "dsv41_cpu"})
    assert env["SGLANG_PLATFORM"] == "dsv41_cpu"
