"""sglang's plugin entry ``dsv41_flags_plugin:load``: it imports nothing of the package at module
level, so a package that cannot be imported is still reported and stops a strict boot, even with
stderr closed or full."""

import sys

import pytest

from ._child import REPO, clean_env, run_cmd


def test_the_engine_plugin_entry_imports_nothing_of_the_package_at_module_level():
    """sglang's loader imports the entry's module before calling it and swallows what that import
    raises: the entry is ``_plugin.load``, whose module imports nothing, so a broken adapter is
    reported and stops the process instead of booting unpatched."""
    import ast
    import importlib.metadata

    (ep,) = [e for e in importlib.metadata.entry_points(group="sglang.srt.plugins") if e.name == "dsv41_flags"]
    assert ep.value == "dsv41_flags_plugin:load"
    tree = ast.parse((REPO / "src" / "dsv41_flags_plugin.py").read_text())
    imported = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names} | \
        {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "os", "sys"}  # the standard library only
    code = ("import sys, importlib.metadata as m\n"
            "sys.modules['dsv41_flags.engine'] = None\n"
            "ep = [e for e in m.entry_points(group='sglang.srt.plugins') if e.name == 'dsv41_flags'][0]\n"
            "ep.load()()\nprint('BOOTED')\n")
    for strict, code_expected in ((None, 3), ("0", 0)):
        env = clean_env(**({"DSV41_STRICT": strict} if strict else {}))
        proc = run_cmd([sys.executable, "-c", code], env, None, timeout=60)
        assert proc.returncode == code_expected and proc.stderr.count("flags.error") == 1, proc.stderr
        assert ("BOOTED" in proc.stdout) == (code_expected == 0) and "Traceback" not in proc.stderr


@pytest.mark.parametrize("stderr", ["closed", "full"])
def test_a_package_that_cannot_load_still_stops_with_stderr_closed_or_full(stderr):
    code = ("import sys\n"
            + ("sys.stderr = None\n" if stderr == "closed" else "sys.stderr = open('/dev/full', 'w')\n")
            + "sys.modules['dsv41_flags.activation'] = None\n"
            "import dsv41_flags_plugin as p\n"
            "try:\n    p.load()\nexcept SystemExit as exc:\n    print('exit', exc.code)\n")
    proc = run_cmd([sys.executable, "-c", code], clean_env(), None, timeout=60)
    # 120: the interpreter's own flush of the /dev/full stream at exit, after the test's print
    assert proc.returncode in (0, 120) and proc.stdout.strip() == "exit 3", (proc.stdout, proc.stderr)
