"""The benchmark runner stays runnable: ``bench/run.py --help`` answers, every benchmark it lists
is a module with ``run(quick)``, and a wrong ``--only`` is refused. (The benchmarks themselves
measure, they never assert: they are not part of the test suite.)"""
from __future__ import annotations

import ast
import subprocess
import sys

from ..conftest import REPO

BENCH = REPO / "bench"


def _listed() -> list[tuple[str, str]]:
    """``(number, module name)`` of every entry of run.py's ``BENCHMARKS``, read from its source."""
    tree = ast.parse((BENCH / "run.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "BENCHMARKS" for t in node.targets):
            return [(e.elts[0].value, e.elts[1].value) for e in node.value.elts]
    raise AssertionError("bench/run.py defines no BENCHMARKS list")


def test_run_help_answers_and_exits_zero():
    proc = subprocess.run([sys.executable, str(BENCH / "run.py"), "--help"], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "--only" in proc.stdout and "--quick" in proc.stdout
    assert ",".join(n for n, _ in _listed()) in proc.stdout


def test_an_unknown_benchmark_number_is_refused():
    proc = subprocess.run([sys.executable, str(BENCH / "run.py"), "--only", "1,99"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2
    assert "--only 1,99: no benchmark 99" in proc.stderr


def test_every_listed_benchmark_is_a_module_with_run():
    listed = _listed()
    assert [n for n, _ in listed] == [str(i) for i in range(1, len(listed) + 1)]
    for _, name in listed:
        source = (BENCH / f"{name}.py").read_text()
        tree = ast.parse(source)
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "run" in functions, f"bench/{name}.py has no run(quick)"
        assert [a.arg for a in functions["run"].args.args] == ["quick"], name
        assert "main(run)" in source, f"bench/{name}.py does not start through _common.main"


def _server_bench():
    """``bench/b7_server.py`` as a module (its directory first on the path, as run.py starts it)."""
    import importlib

    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("b7_server")
    finally:
        sys.path.remove(str(BENCH))


def test_the_server_bench_reads_a_process_start_and_cpu_from_proc():
    import os

    b7 = _server_bench()
    start, cpu = b7.proc_stat(os.getpid())
    assert 0 < start <= b7.boot_clock() and cpu > 0
    assert b7.proc_stat(2 ** 22 + 1) is None            # no such process (above pid_max's default)
    assert b7.role_of(os.getpid(), os.getpid()) == "launcher"   # the group leader
    assert b7.role_of(os.getpid(), os.getppid()) is None        # not a process sglang named


def test_the_server_bench_reads_its_extra_environment_and_names_a_bad_item():
    import pytest

    b7 = _server_bench()
    assert b7.extra_env("") == {}
    assert b7.extra_env("DSV41_FOLDED_FENCE=1, A=b=c") == {"DSV41_FOLDED_FENCE": "1", "A": "b=c"}
    with pytest.raises(ValueError, match="'oops' is not NAME=VALUE"):
        b7.extra_env("A=1,oops")
