"""The ``dsv41-flags`` command line (typer + rich). Human tables by default, ``--json`` for tools.

Exit codes: 0 clean; 1 a problem was found (settings error, drift); 2 bad usage.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console

from ._drift import engine_version, fixed_upstream, version_problem
from ._errors import DeclarationError, FlagsError, SettingsError
from ._names import RESERVED, suggest
from ._fingerprint import compute, diff as payload_diff, prefix_sources, read_sidecar, write_sidecar
from ._runtime import Runtime, resolve_launch
from ._settings import _jsonable
from ._static import check_feature

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Feature flags for patches applied to a running SGLang engine.")
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, soft_wrap=True, markup=False)

SettingsOpt = typer.Option(None, "--settings", "-s", help="settings file (repeatable); default: "
                           "DSV41_SETTINGS, else ./settings.toml, else the project's settings.toml")
ProfileOpt = typer.Option(None, "--profile", "-p", help="profile (default: DSV41_ENV, else default)")
JsonOpt = typer.Option(False, "--json", help="print JSON on stdout")
IMPORT_TIMEOUT_S = 300


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(_jsonable(data), indent=2, default=str) + "\n")


def _fail(exc: FlagsError, as_json: bool) -> None:
    problems = ([{"key": p.key, "origin": p.origin, "severity": p.severity, "message": p.message}
                 for p in exc.problems] if isinstance(exc, SettingsError)
                else [{"key": "", "origin": "", "severity": "error", "message": str(exc)}])
    if as_json:
        _emit_json({"ok": False, "problems": problems})
    else:
        for p in problems:
            err.print(f"error: {p['message']}", style="red")
    raise typer.Exit(1)


def _load(settings, profile, as_json, *, allow_problems=False):
    try:
        features, resolution, fdir = resolve_launch(settings, profile)
    except FlagsError as exc:
        _fail(exc, as_json)
    if resolution.errors and not allow_problems:
        _fail(SettingsError(list(resolution.errors)), as_json)
    return features, resolution, fdir


def _value(resolution, key):
    r = resolution.values.get(key)
    return r.value if r else None


@app.command()
def status(settings: Optional[List[Path]] = SettingsOpt, profile: Optional[str] = ProfileOpt,
           as_json: bool = JsonOpt,
           argv: Optional[List[str]] = typer.Argument(None, help="launch command line (after --) "
                                                      "the fingerprint is computed for")) -> None:
    """Profile, settings files loaded, each feature (flag value + source, state, target, version
    range, whether its target and required names exist in the installed engine), fingerprint.

    The fingerprint is that of the launch command given after ``--`` (an empty one when none is
    given: it says so, and ``dsv41-flags fingerprint -- CMD`` gives a real launch's).
    Reads the engine's source, imports nothing of it: state is what a boot would reach before
    importing targets (off / armed / drifted / fixed-upstream). Exit 1 on settings errors, or
    when an armed feature drifted in strict mode (a boot would stop)."""
    features, resolution, fdir = _load(settings, profile, as_json)
    launch = list(argv or [])
    fp = compute(resolution, features, launch, os.environ)
    fp_for = (f"for the launch command {' '.join(launch)}" if launch else
              "for an empty launch command (the real launch's: dsv41-flags fingerprint -- CMD, "
              "or dsv41-flags status -- CMD)")
    drift = {f.name: _drift_of(f, fdir) for f in features}
    # the runtime decides each state (the rules of a boot); the CLI renders them
    states = {st.name: st for st in Runtime(features, resolution, fp, features_dir=fdir).preview(
        {name: missing for name, (missing, _) in drift.items()})}
    rows = []
    for f in features:
        st = states[f.name]
        missing, source = drift[f.name]
        rows.append({"name": f.name, "state": st.state, "value": st.value, "source": st.source,
                     "target": f.target, "engine": f.engine, "engine_version": engine_version(f),
                     "target_found": source is not None, "missing": missing,
                     "detail": st.detail if st.state == "fixed-upstream" else "",
                     "options": resolution.options_of(f)})
    data = {"profile": resolution.profile, "settings_files": list(resolution.files),
            "features_dir": str(fdir), "fingerprint": fp.digest,
            "fingerprint_for": {"argv": launch, "label": fp_for}, "features": rows,
            "warnings": [p.message for p in resolution.warnings], "notes": list(resolution.notes)}
    drifted = resolution.strict and any(r["state"] == "drifted" for r in rows)
    if as_json:
        _emit_json(data)
        raise typer.Exit(1 if drifted else 0)
    out.print(f"profile {data['profile']}  fingerprint {fp.digest[:16]}… {fp_for}", highlight=False)
    out.print("settings files: " + (", ".join(data["settings_files"]) or "none (declared defaults)"),
              highlight=False)
    for row in rows:
        ok = "ok" if row["target_found"] and not row["missing"] else \
            ("missing: " + "; ".join(row["missing"]))
        out.print(f"  {row['name']:<16} {row['state']:<14} {str(row['value']):<6} "
                  f"from {row['source']}")
        out.print(f"      target {row['target']} [{row['engine']}, installed "
                  f"{row['engine_version'] or 'none'}]: {ok}")
    for w in data["warnings"]:
        err.print(f"warning: {w}", style="yellow")
    for n in data["notes"]:
        err.print(f"note: {n}")
    if drifted:
        err.print("error: an armed feature drifted (strict mode): a boot would stop", style="red")
        raise typer.Exit(1)


@app.command()
def validate(settings: Optional[List[Path]] = SettingsOpt, profile: Optional[str] = ProfileOpt,
             as_json: bool = JsonOpt,
             only: bool = typer.Option(False, "--only", help="check the chosen profile only")) -> None:
    """Resolve without installing anything: the chosen profile (DSV41_ENV / --profile), then every
    other profile of the settings files, so that a typo in [tp4] is caught while validating
    [default]. Lists every problem at once (each with its profile); exit 1 on any error."""
    try:
        features, resolution, _ = resolve_launch(settings, profile)
    except FlagsError as exc:
        _fail(exc, as_json)
    problems, seen = [], set()
    others = [] if only else [p for p in resolution.profiles if p != resolution.profile]
    for name, res in [(resolution.profile, resolution)] + [(p, None) for p in others]:
        try:
            res = res or resolve_launch(settings, name)[1]
            found = list(res.problems)
        except SettingsError as exc:
            found = exc.problems
        for p in found:
            if p.message not in seen:
                seen.add(p.message)
                problems.append({"profile": name, "key": p.key, "origin": p.origin,
                                 "severity": p.severity, "message": p.message})
    ok = not any(p["severity"] == "error" for p in problems)
    checked = [resolution.profile] + others
    if as_json:
        _emit_json({"ok": ok, "profile": resolution.profile, "profiles_checked": checked,
                    "settings_files": list(resolution.files), "problems": problems})
    else:
        for p in problems:
            err.print(f"{p['severity']} [{p['profile']}]: {p['message']}",
                      style="red" if p["severity"] == "error" else "yellow")
        out.print(f"{'ok' if ok else 'invalid'}: {len(features)} feature(s), profile(s) "
                  f"{', '.join(checked)}, {len(problems)} problem(s)")
    raise typer.Exit(0 if ok else 1)


@app.command()
def explain(key: str = typer.Argument(..., help="feature name, flag/option key or DSV41_ variable"),
            settings: Optional[List[Path]] = SettingsOpt, profile: Optional[str] = ProfileOpt,
            as_json: bool = JsonOpt) -> None:
    """The provenance chain of a key (declared default -> file [section] -> variable) and its
    feature's declaration (summary, target, requires, version range, volatile, options, refs)."""
    features, resolution, _ = _load(settings, profile, as_json, allow_problems=True)
    wanted = key.strip().upper().removeprefix("DSV41_")
    for f in features:
        keys = f.keys()
        if wanted == f.flag or wanted in keys:
            shown = [wanted] if wanted in keys and wanted != f.flag else list(keys)
            data = {"feature": f.name, "summary": f.summary, "target": f.target,
                    "requires": list(f.requires), "engine": f.engine, "fixed_in": f.fixed_in,
                    "volatile": list(f.volatile), "refs": list(f.refs), "after": list(f.after),
                    "source_file": f.source,
                    "options": [{"name": o.name, "key": f.option_key(o), "kind": o.kind,
                                 "default": o.default, "minimum": o.minimum, "maximum": o.maximum,
                                 "choices": list(o.choices), "volatile": o.volatile, "help": o.help}
                                for o in f.options],
                    "keys": {k: resolution.values[k].to_dict() for k in shown},
                    "problems": [p.message for p in resolution.problems if p.key in shown]}
            if as_json:
                _emit_json(data)
                if any(p.severity == "error" for p in resolution.problems if p.key in shown):
                    raise typer.Exit(1)
                return
            out.print(f"{f.name}: {f.summary}", style="bold")
            out.print(f"  target {f.target}  engine {f.engine}  refs {', '.join(f.refs) or '-'}",
                      highlight=False)
            out.print(f"  requires: {', '.join(f.requires) or '-'}")
            out.print(f"  volatile: {', '.join(f.volatile) or '-'}   declared in {f.source}")
            for o in data["options"]:
                limits = "".join(f", {n} {o[n]}" for n in ("minimum", "maximum") if o[n] is not None)
                limits += f", one of {', '.join(o['choices'])}" if o["choices"] else ""
                out.print(f"  option {o['key']} ({o['kind']}, default {o['default']!r}{limits}"
                          f"{', volatile' if o['volatile'] else ''}): {o['help']}")
            bad = [p for p in resolution.problems if p.key in shown and p.severity == "error"]
            for p in bad:
                err.print(f"error: {p.message}", style="red")
            for k in shown:
                r = resolution.values[k]
                out.print(f"  {k} = {r.value!r}  (from {r.source})")
                for i, (src, raw) in enumerate(r.chain):
                    out.print(f"    {i + 1}. {src}: {raw!r}")
            if bad:
                raise typer.Exit(1)
            return
    if wanted in RESERVED:
        value = {"ENV": resolution.profile, "SETTINGS": list(resolution.files)}.get(
            wanted, resolution.reserved.get(wanted))
        what = RESERVED[wanted].what
        if as_json:
            _emit_json({"reserved": wanted, "what": what, "value": value})
        else:
            out.print(f"{wanted}: {what} = {value!r} (reserved name, never a flag; see README)")
        return
    known = sorted(k for f in features for k in f.keys())
    msg = f"{key!r} is no feature, flag or option key; known: {', '.join(known)}" + suggest(wanted, known)
    _fail(FlagsError(msg), as_json)


@app.command()
def fingerprint(settings: Optional[List[Path]] = SettingsOpt, profile: Optional[str] = ProfileOpt,
                explain_: bool = typer.Option(False, "--explain", help="every key in and out"),
                diff: Optional[Path] = typer.Option(None, "--diff", help="sidecar to compare with"),
                write: Optional[Path] = typer.Option(None, "--write", help="write a sidecar here"),
                as_json: bool = JsonOpt,
                argv: Optional[List[str]] = typer.Argument(None, help="launch command line (after --)")) -> None:
    """The launch fingerprint of this environment + settings (+ the launch argv given after --)."""
    features, resolution, _ = _load(settings, profile, as_json)
    fp = compute(resolution, features, list(argv or []), os.environ)
    data: dict = {"fingerprint": fp.digest}
    if explain_:
        data["payload"] = fp.payload
        data["included"] = fp.included
        data["excluded"] = fp.excluded
        data["prefixes"] = prefix_sources(resolution)
    if diff is not None:
        side = read_sidecar(diff)
        if side.legacy:
            data["diff"] = {"sidecar": str(diff), "same": False, "legacy": True,
                            "reason": "written by the older adapter (seed autotune_keep.py): a bare "
                                      "hash with no payload; treated as a different launch"}
        elif side.payload is None:
            data["diff"] = {"sidecar": str(diff), "same": False, "reason": side.error}
        else:
            changes = payload_diff(side.payload, fp.payload)
            data["diff"] = {"sidecar": str(diff), "same": side.digest == fp.digest, "changes": changes}
    if write:  # after --diff: comparing with the file being replaced must see the old one
        try:
            write_sidecar(write, fp)
        except OSError as exc:
            _fail(FlagsError(f"--write {str(write)!r}: cannot write the sidecar: "
                             f"{exc.strerror or exc}"), as_json)
        data["written"] = str(write)
    if as_json:
        _emit_json(data)
    else:
        out.print(fp.digest)
        if explain_:
            for prefix, why in data["prefixes"].items():
                out.print(f"  prefix   {prefix}  ({why})", highlight=False)
            for part in ("argv", "env", "settings"):
                val = fp.payload[part]
                items = val.items() if isinstance(val, dict) else [("argv", val)]
                for k, v in items:
                    why = fp.included.get(k, "")
                    out.print(f"  in   {part:8} {k} = {v!r}" + (f"  ({why})" if why else ""),
                              highlight=False)
            for k, why in sorted(fp.excluded.items()):
                out.print(f"  out  {k}: {why}", highlight=False)
        if "diff" in data:
            d = data["diff"]
            if d.get("same"):
                out.print(f"same launch as {diff}")
            elif "changes" in d:
                for c in d["changes"]:
                    out.print(f"  {c['part']} {c['key']}: {c['old']!r} -> {c['new']!r}")
                if not d["changes"]:
                    out.print(f"different launch: {diff} records fingerprint {side.digest[:16]}… "
                              f"for the same payload (edited by hand?)")
            elif d.get("legacy"):
                out.print(f"different launch: {diff} {d['reason']}")
            else:
                err.print(f"error: cannot compare: {d['reason']}", style="red")
    if "diff" in data and not data["diff"].get("same"):
        # 1: a different launch; 2: the sidecar could not be read as one
        raise typer.Exit(1 if ("changes" in data["diff"] or data["diff"].get("legacy")) else 2)


@app.command("diff")
def diff_profiles(profile_a: str, profile_b: str, settings: Optional[List[Path]] = SettingsOpt,
                  as_json: bool = JsonOpt) -> None:
    """Flags and options that differ between two profiles, and whether their fingerprints differ
    (an A/B boot across them re-tunes when they do)."""
    fa, ra, _ = _load(settings, profile_a, as_json)
    fb, rb, _ = _load(settings, profile_b, as_json)
    keys = sorted(set(ra.values) | set(rb.values))
    changes = [{"key": k, "a": _value(ra, k), "b": _value(rb, k),
                "a_source": ra.values[k].source if k in ra.values else None,
                "b_source": rb.values[k].source if k in rb.values else None}
               for k in keys if _value(ra, k) != _value(rb, k)]
    fpa, fpb = compute(ra, fa, [], os.environ), compute(rb, fb, [], os.environ)
    data = {"a": profile_a, "b": profile_b, "changes": changes, "fingerprint_a": fpa.digest,
            "fingerprint_b": fpb.digest, "fingerprints_differ": fpa.digest != fpb.digest,
            "payload_changes": payload_diff(fpa.payload, fpb.payload)}
    if as_json:
        _emit_json(data)
        return
    for c in changes:
        out.print(f"  {c['key']}: {c['a']!r} ({profile_a}) vs {c['b']!r} ({profile_b})")
    if not changes:
        out.print("  no flag or option differs")
    out.print("fingerprints differ: caches re-tune across these profiles" if data["fingerprints_differ"]
              else "same fingerprint: caches are reused across these profiles")


@app.command()
def check(all_: bool = typer.Option(False, "--all", help="every feature, not only armed ones"),
          live: bool = typer.Option(False, "--import", help="import targets (in a subprocess)"),
          settings: Optional[List[Path]] = SettingsOpt, profile: Optional[str] = ProfileOpt,
          as_json: bool = JsonOpt) -> None:
    """Drift check without importing the engine: each feature's target source is parsed and every
    required class, function, method, parameter and module-level name looked up; the installed
    engine version is checked against the feature's range. Exit 1 on drift."""
    features, resolution, fdir = _load(settings, profile, as_json, allow_problems=True)
    chosen = [f for f in features if all_ or resolution.flag(f)]
    results = []
    for f in chosen:
        missing, source = _drift_of(f, fdir, live=live)
        results.append({"feature": f.name, "target": f.target, "source": source, "missing": missing,
                        "fixed_upstream": fixed_upstream(f) or "", "ok": not missing})
    ok = all(r["ok"] for r in results)
    if as_json:
        _emit_json({"ok": ok, "mode": "import" if live else "static", "features": results})
    else:
        for r in results:
            line = "ok" if r["ok"] else "DRIFT: missing " + ", ".join(r["missing"])
            out.print(f"{r['feature']:20} {r['target']}  {line}")
        if not results:
            out.print("no feature checked (none armed; use --all)")
    raise typer.Exit(0 if ok else 1)


def _drift_of(feature, fdir, *, live: bool = False) -> tuple[list[str], str | None]:
    """``(missing, source)``: the engine version problem (if any) then the missing ``requires``
    pieces, from the target's source (``source`` = its file, None when not found) or, with
    ``live``, from importing it in a subprocess (``source`` None)."""
    if live:
        missing, source = _live_missing(feature, fdir), None
    else:
        static = check_feature(feature)
        missing, source = list(static.missing), static.source
    bad_version = version_problem(feature)
    return ([bad_version] if bad_version else []) + missing, source


def _live_missing(feature, fdir) -> list[str]:
    code = ("import importlib, json, sys\n"
            "from pathlib import Path\n"
            "from dsv41_flags._discovery import discover\n"
            "from dsv41_flags._drift import missing_on\n"
            f"f = {{x.name: x for x in discover(Path({str(fdir)!r}))}}[{feature.name!r}]\n"
            "try:\n    m = importlib.import_module(f.target)\n"
            "except Exception as e:\n    print(json.dumps([f'module {f.target} ({type(e).__name__}: {e})'])); sys.exit()\n"
            "print(json.dumps(missing_on(f, m)))\n")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [f"module {feature.target} (import did not finish within {IMPORT_TIMEOUT_S} s)"]
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
        return [f"module {feature.target} (the import check process failed: {last})"]


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context, settings: Optional[List[Path]] = SettingsOpt,
        profile: Optional[str] = ProfileOpt) -> None:
    """Run ``CMD ARGS...`` (after --) so that every Python process started under it activates
    dsv41_flags at interpreter start (bootstrap sitecustomize first on PYTHONPATH, chaining any
    existing one). Resolves once here and hands the snapshot down. Exit code and signals pass
    through (the command replaces this process)."""
    from ._launcher import exec_command

    if not ctx.args:
        err.print("usage: dsv41-flags run -- CMD [ARGS...]")
        raise typer.Exit(2)
    try:
        exec_command(list(ctx.args), settings, profile)
    except FlagsError as exc:
        _fail(exc, False)
    except FileNotFoundError:
        err.print(f"error: command not found: {ctx.args[0]}", style="red")
        raise typer.Exit(127) from None
    except OSError as exc:
        err.print(f"error: cannot run {ctx.args[0]}: {exc.strerror or exc}", style="red")
        raise typer.Exit(126) from None


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except DeclarationError as exc:
        err.print(f"error: {exc}")
        sys.exit(1)
