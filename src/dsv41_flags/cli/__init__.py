"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The ``dsv41-flags`` command line (typer + rich). Human tables by default, ``--json`` for tools.

Exit codes: 0 clean; 1 a problem was found (settings error, drift); 2 bad usage; 74
(``EX_IOERR``) the command's own output could not be written (``cli.output``).
"""
# No ``from __future__ import annotations`` here: typer reads every command's annotations at
# each start, and real objects spare it evaluating strings (about 1 ms per command).

import errno
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from dsv41_flags.cli.output import (EX_IOERR, STREAM_ERRNOS, console, emit_json, err,
                                    finish_streams, mend_streams, out, report_lost, safe)
from dsv41_flags.drift import (Presence, drifted_text, fixed_upstream, split_verdicts,
                               verdicts_by_import)
from dsv41_flags.errors import DeclarationError, FlagsError, SettingsError
from dsv41_flags.text import quoted
from dsv41_flags.names import RESERVED, suggest
from dsv41_flags.fingerprint import compute, masked_argv, prefix_sources
from dsv41_flags.secrecy import (MASK, is_secret, masked_changes, masked_explanation, masked_url,
                                 secret_names)
from dsv41_flags.snapshot import Launch, resolved_to_dict
from dsv41_flags.assembly import fleet_boot, resolve_launch
from dsv41_flags.runtime import Runtime
from dsv41_flags.wire import jsonable
from dsv41_flags.state import Cell, State, blocks_boot
from dsv41_flags.status import FeatureStatus, preview


class _Group(TyperGroup):
    """The ``dsv41-flags`` group: typer's, with every way out of a command made an exit status
    (``main``)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's ``main`` (the documented entry of a command), every way out of a command made
        an exit status: a usage error (unknown option, missing argument, a value ``--timeout``
        refuses) is exit 2, shown as a JSON object when ``--json`` is among the options
        (``_usage_error``'s shape: key, origin "command line", message), else as click shows it;
        a ``DeclarationError`` and an abort are exit 1. Output that could not be written (stdout
        or stderr closed, full, a reader that quit: ``cli.output``) makes the status
        ``EX_IOERR`` (74), said in one line on stderr when stderr can take it; never a
        traceback. ``standalone_mode``: exit through ``sys.exit`` (True) or return the
        status."""
        mend_streams()
        argv = list(sys.argv[1:] if args is None else args)
        options = argv[:argv.index("--")] if "--" in argv else argv
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except typer.TyperException as exc:  # click's errors, as typer exports them
            code = getattr(exc, "exit_code", 1)
            if code == 2 and "--json" in options:  # a usage error
                param = getattr(exc, "param", None)
                key = (param.opts[0] if getattr(param, "opts", None) else
                       getattr(param, "name", None) or getattr(exc, "option_name", None) or "")
                emit_json({"ok": False, "problems": [{"key": key, "origin": "command line",
                                                      "severity": "error",
                                                      "message": exc.format_message()}]})
            else:
                try:
                    exc.show()  # click's own rendering, on stderr
                except OSError as lost:
                    err.lost(lost)
                except ValueError:  # a closed file object
                    err.lost(OSError(errno.EBADF, "stderr is closed"))
        except typer.Abort:
            code = 1
            err.print("Aborted!")
        except DeclarationError as exc:
            code = 1
            err.print(f"error: {exc}")
        except OSError as exc:  # click's own help or message on stdout
            if exc.errno not in STREAM_ERRNOS:
                raise
            out.lost(exc)
            code = EX_IOERR
        lost = finish_streams()
        if lost:
            code = EX_IOERR
            report_lost(lost)
        if standalone_mode:
            sys.exit(code)
        return code


class _Command(TyperCommand):
    """A command whose help shows each argument by its metavar alone: ``KEY`` in the usage line
    and the Arguments section (typer adds ``{KEY}`` and the Python type, ``<str>``), so every
    help line reads as the docstrings mean it. Overrides click's documented
    ``collect_usage_pieces`` and ``format_options``; parameters are coerced by typer itself."""

    def collect_usage_pieces(self, ctx):  # noqa: D102 - click's
        return [self.options_metavar] + [
            _shown_metavar(p) if p.required else f"[{_shown_metavar(p)}]"
            for p in self.get_params(ctx) if p.param_type_name == "argument"]

    def format_options(self, ctx, formatter):  # noqa: D102 - click's
        rows: dict[str, list] = {"argument": [], "option": []}
        for p in self.get_params(ctx):
            record = p.get_help_record(ctx)
            if record is not None and p.param_type_name in rows:
                rows[p.param_type_name].append(
                    (_shown_metavar(p), record[1]) if p.param_type_name == "argument" else record)
        for title, kind in (("Arguments", "argument"), ("Options", "option")):
            if rows[kind]:
                with formatter.section(title):
                    formatter.write_dl(rows[kind])


def _shown_metavar(param) -> str:
    name = param.metavar or param.name.upper()
    return f"{name}..." if getattr(param, "nargs", 1) == -1 else name


# rich_markup_mode=None: no markup is interpreted ([tp4] stays [tp4]); click re-wraps paragraphs
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, cls=_Group,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("dsv41-flags")
        except PackageNotFoundError:
            v = "unknown (not installed)"
        out.print(f"dsv41-flags {v}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Feature flags for patches applied to a running SGLang engine.

    Reads settings.toml (profiles [default], [tp3], ...) and DSV41_* variables, reports which
    features a boot arms, checks the installed engine for drift, and runs commands with the
    framework active in every Python process. Exit codes: 0 clean, 1 a problem was found, 2 bad
    usage, 74 the output could not be written (stdout or stderr closed, full or broken)."""


SettingsOpt = typer.Option(None, "--settings", "-s", metavar="FILE",
                           help="Settings file (repeatable). Default: DSV41_SETTINGS, else "
                                "./settings.toml, else the settings.toml shipped in the package.")
ProfileOpt = typer.Option(None, "--profile", "-p", metavar="NAME",
                          help="Profile (default: DSV41_ENV, else default).")
JsonOpt = typer.Option(False, "--json", help="Print JSON on stdout.")
IMPORT_TIMEOUT_S = 300


def _fail(exc: FlagsError, as_json: bool) -> None:
    problems = ([{"key": p.key, "origin": p.origin, "severity": p.severity, "message": p.message}
                 for p in exc.problems] if isinstance(exc, SettingsError)
                else [{"key": "", "origin": "", "severity": "error", "message": str(exc)}])
    if as_json:
        emit_json({"ok": False, "problems": problems})
    else:
        for p in problems:
            err.print(f"error: {p['message']}", style="red")
    raise typer.Exit(1)


def _usage_error(key: str, message: str, as_json: bool) -> None:
    """Refuse the command line (exit 2), as a JSON answer under --json."""
    if as_json:
        emit_json({"ok": False, "problems": [{"key": key, "origin": "command line",
                                               "severity": "error", "message": message}]})
    else:
        err.print(f"error: {message}", style="red", highlight=False)
    raise typer.Exit(2)


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


UrlOpt = typer.Option(None, "--url", metavar="URL", help="a running engine server, http://HOST:PORT")
ApiKeyOpt = typer.Option(None, "--api-key", metavar="KEY", envvar="DSV41_API_KEY", show_default=False,
                         help="the server's admin key (its --admin-api-key; its --api-key when it "
                              "has none), sent as a bearer key; default DSV41_API_KEY (out of shell "
                              "history). Never printed.")


def _seconds(text) -> float:
    """``--timeout``: a number of seconds in (0, 3600] (``text`` as typed, or the default), else
    a usage error naming the option and quoting the value (bounded)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not 0 < value <= 3600:
        raise typer.BadParameter(f"{quoted(str(text))} is not a number of seconds in (0, 3600]")
    return value


TimeoutOpt = typer.Option(65.0, "--timeout", metavar="SECONDS", parser=_seconds,
                          help="one deadline for the whole call to the server (connect and read)")


@app.command(short_help="What a boot would arm, with every value and its source.",
             context_settings={"allow_extra_args": True},
             options_metavar="[OPTIONS] [-- CMD [ARGS]...]")
def status(ctx: typer.Context, settings: Optional[List[Path]] = SettingsOpt,
           profile: Optional[str] = ProfileOpt, as_json: bool = JsonOpt,
           url: Optional[str] = UrlOpt, api_key: Optional[str] = ApiKeyOpt,
           timeout: float = TimeoutOpt) -> None:
    """Profile, settings files loaded, each feature (flag value and source, live-safe or not:
    live = switchable while serving, boot = read at boot only; every option's value and source,
    state, target, version range, whether its target and required names exist in the installed
    engine), fingerprint.

    The fingerprint is that of the launch command CMD ARGS given after -- (an empty one when none
    is given: it says so, and dsv41-flags fingerprint -- CMD gives a real launch's). Reads the
    engine's source, imports nothing of it: state is what a boot would reach before
    importing targets (off / armed / drifted / fixed-upstream). Exit 1 on settings errors, or
    when an armed feature drifted in strict mode (a boot would stop).

    With --url: asks the running server instead: per scheduler rank (and the server process),
    each feature's state now, the generation and step of each rank and its switches. Exit 1 when
    the server cannot be asked or its ranks disagree on the generation."""
    if url:
        from dsv41_flags.cli.remote import remote_status

        remote_status(url, as_json, emit_json, api_key=api_key, timeout_s=timeout)
        return
    features, resolution, fdir = _load(settings, profile, as_json)
    launch = list(ctx.args)
    fleet = _read_fleet(resolution, features, launch, as_json) if resolution.reserved.get(
        "FLEET") else None
    if fleet is not None:
        resolution = fleet
        fleet = _fleet_line(resolution)
    fp = compute(resolution, features, launch, os.environ)
    launch = masked_argv(launch, secret_names(resolution))   # as shown: no secret value
    fp_for = (f"for the launch command {' '.join(launch)}" if launch else
              "for an empty launch command (the real launch's: dsv41-flags fingerprint -- CMD, "
              "or dsv41-flags status -- CMD)")
    rows = _feature_rows(features, resolution, fdir, fp)
    data = {"profile": resolution.profile, "settings_files": list(resolution.files),
            "features_dir": str(fdir), "fingerprint": fp.digest,
            "fingerprint_for": {"argv": launch, "label": fp_for},
            "features": [row.model_dump(mode="json") for row in rows],
            "warnings": [p.message for p in resolution.warnings], "notes": list(resolution.notes)}
    if fleet is not None:
        data["fleet"] = fleet
    blockers = _boot_blockers(rows, resolution)
    if as_json:
        emit_json(data)
        raise typer.Exit(1 if blockers else 0)
    out.print(f"profile {data['profile']}  fingerprint {fp.digest[:16]}… {fp_for}", highlight=False)
    out.print("settings files: " + (", ".join(data["settings_files"]) or "none (declared defaults)"),
              highlight=False)
    if fleet is not None:
        out.print(f"fleet: {fleet['where']}, read once as targeting key "
                  f"{fleet['targeting_key']}", highlight=False)
    width = max([16] + [len(row.name) for row in rows])
    for row in rows:
        ok = "; ".join(([f"missing: {'; '.join(row.missing)}"] if row.missing else []) +
                       ([f"undecided: {'; '.join(row.undecided)}"] if row.undecided else [])) \
            or (Presence.OK if row.target_found else "no source")
        out.print(f"  {row.name:<{width}} {row.state:<14} {str(row.value):<6} "
                  f"{'live' if row.live else 'boot':<5} from {row.source}", highlight=False)
        for name, o in row.options.items():
            out.print(f"      option {name} = {o.value!r}  from {o.source}", highlight=False)
        engine = (f"{row.engine}, installed {row.engine_version or 'none'}" if row.engine
                  else "no engine range")
        out.print(f"      target {row.target} [{engine}]: {ok}", highlight=False)
    for w in data["warnings"]:
        err.print(f"warning: {w}", style="yellow")
    for n in data["notes"]:
        err.print(f"note: {n}")
    if any(row.undecided for row in rows):
        err.print(_UNDECIDED_NOTE)
    if blockers:
        _print_blockers(blockers)
        raise typer.Exit(1)


def _read_fleet(resolution, features, launch, as_json):
    """``resolution`` with the flag service's values read once, as the launch command ``launch``
    would read them at boot (``assembly.fleet_boot``: its port in the targeting key). Exits 1
    (``_fail``) when that makes a settings error (``fleet.required`` in strict mode)."""
    resolution = fleet_boot(resolution, features, launch, os.environ)
    if resolution.errors:
        _fail(SettingsError(list(resolution.errors)), as_json)
    return resolution


def _fleet_line(resolution) -> dict:
    """What ``status`` says of the fleet it read: ``where`` (no secret) and ``targeting_key``."""
    context = resolution.reserved["FLEET"].get("context", {})
    return {"where": _fleet_where(resolution),
            "targeting_key": context.get("targeting_key", "")}


def _feature_rows(features, resolution, fdir, fp, *, armed_only: bool = False) -> list[FeatureStatus]:
    """Per feature, what ``status`` shows: the state a boot would reach before importing targets
    (decided by the runtime's rules, ``Runtime.preview``), flag value and source, ``options``
    (name -> {value, source}), target, engine range and installed version, static drift
    (``missing``: what a boot would stop on) and ``undecided`` (requirements only the live check
    at import can decide: never drift). ``armed_only``: only features whose flag is on (the ones
    a boot stops on)."""
    chosen = [f for f in features if not armed_only or resolution.flag(f)]
    found = {f.name: _drift_of(f, fdir) for f in chosen}
    rt = Runtime(features, Launch.of(resolution, fp, features, fdir, {}))
    return preview(rt, {n: (m, s) for n, (m, _, s) in found.items()}, [f.name for f in chosen],
                   undecided={n: u for n, (_, u, _) in found.items()})


_UNDECIDED_NOTE = ("note: an undecided requirement is not drift: the live check decides it when the "
                   "target is imported (`dsv41-flags check --import` decides it now)")


def _boot_blockers(rows: list[FeatureStatus], resolution) -> list[FeatureStatus]:
    """The rows of features whose state stops a boot (``state.blocks_boot``)."""
    return [r for r in rows if blocks_boot(r.state, resolution.strict)]


def _refuse_blocked(rt: Runtime, what: str) -> None:
    """Exit 1, with the message status gives, when strict mode would stop this launch (an armed
    feature that drifted, failed or cannot install): ``run`` and ``serve`` start nothing then."""
    blockers = _boot_blockers(_feature_rows(tuple(rt.features.values()), rt.resolution,
                                            rt.features_dir, rt.fingerprint, armed_only=True),
                              rt.resolution)
    if blockers:
        _print_blockers(blockers)
        err.print(f"error: not starting {what}", style="red", highlight=False)
        raise typer.Exit(1)


def _print_blockers(blockers: list[FeatureStatus]) -> None:
    for r in blockers:
        err.print(f"error: feature {r.name!r}: {drifted_text(r.target, r.missing)}", style="red",
                  highlight=False)
    err.print(f"error: an {State.ARMED} feature {State.DRIFTED} (strict mode): a boot would stop",
              style="red")


@app.command("set", cls=_Command, short_help="Switch a live feature on every rank of a running server, in lockstep.")
def set_(assignment: str = typer.Argument(..., metavar="NAME=VALUE",
                                         help="a live feature and on/off, e.g. folded_fence=on"),
         url: str = typer.Option(..., "--url", metavar="URL", help="the engine server, http://HOST:PORT"),
         by: Optional[str] = typer.Option(None, "--by", metavar="WHO", help="who asks (recorded in the event and "
                                          "the audit; default USER@HOST)"),
         as_json: bool = JsonOpt, api_key: Optional[str] = ApiKeyOpt,
         timeout: float = TimeoutOpt) -> None:
    """Switch a live feature on or off on every scheduler rank of a running sglang server, in
    lockstep: all ranks at the same step, or none (a rank that cannot apply it makes every rank
    keep its value). The switch is an override until the next launch: the settings files stay the
    source of truth at boot. Exit 0 applied; 1 refused or unreachable; 2 not NAME=VALUE."""
    from dsv41_flags.cli.remote import remote_set

    remote_set(assignment, url, by, as_json, emit_json, api_key=api_key, timeout_s=timeout)


fleet_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="The flag service that drives live features (docs/fleet.md).")
app.add_typer(fleet_app, name="fleet")


@fleet_app.command("status", cls=_Command, short_help="Every server's fleet values against what it runs.")
def fleet_status(urls: List[str] = typer.Argument(..., metavar="URL",
                                                  help="running engine servers, http://HOST:PORT"),
                 as_json: bool = JsonOpt, api_key: Optional[str] = ApiKeyOpt,
                 timeout: float = TimeoutOpt) -> None:
    """One table of every server: for each feature, the flag service's value for that server,
    the value in effect, and why they differ (restart needed, refused by a rank, flag service
    unreachable since T, a value of the wrong type). Exit 1 when a server cannot be asked, has
    no flag service, is cut off from it or runs another value than its fleet value."""
    from dsv41_flags.cli.remote import fleet_status as show

    show(urls, as_json, emit_json, api_key=api_key, timeout_s=timeout)


@app.command(short_help="Would each profile boot? Every problem at once.")
def validate(settings: Optional[List[Path]] = SettingsOpt, profile: Optional[str] = ProfileOpt,
             as_json: bool = JsonOpt,
             only: bool = typer.Option(False, "--only", help="Check the chosen profile only.")) -> None:
    """Would each profile boot? Resolves without installing anything the chosen profile
    (DSV41_ENV or --profile), then every other profile of the settings files, so that a typo in
    [tp4] is caught while validating [default]; for each profile, the features it arms are checked
    for drift against the installed engine's source, as status does.

    A profile with a fleet table reads its flag service once, as its boot would (bounded by
    fleet.boot_timeout_s), so the flag service's problems and values count too.

    Lists every problem at once, each with its profile: settings errors, and in strict mode a
    drifted armed feature (a boot of that profile would stop). Exit 1 on any error."""
    try:
        features, resolution, fdir = resolve_launch(settings, profile)
    except FlagsError as exc:
        _fail(exc, as_json)
    problems, seen = [], set()
    others = [] if only else [p for p in resolution.profiles if p != resolution.profile]
    for name, res in [(resolution.profile, resolution)] + [(p, None) for p in others]:
        try:
            res = res or resolve_launch(settings, name)[1]
            if res.reserved.get("FLEET") and not res.errors:
                # the flag service read once, as that profile's boot would (a required one
                # that cannot be read stops a strict boot; its values decide what is armed)
                res = fleet_boot(res, features, [], os.environ)
            found = list(res.problems) + _drift_problems(features, res, fdir)
        except SettingsError as exc:
            found = exc.problems
        for p in found:
            once = (name, p.message) if p.key == "DRIFT" else p.message  # drift: per profile
            if once not in seen:
                seen.add(once)
                problems.append({"profile": name, "key": p.key, "origin": p.origin,
                                 "severity": p.severity, "message": p.message})
    ok = not any(p["severity"] == "error" for p in problems)
    checked = [resolution.profile] + others
    if as_json:
        emit_json({"ok": ok, "profile": resolution.profile, "profiles_checked": checked,
                    "settings_files": list(resolution.files), "problems": problems})
    else:
        for p in problems:
            err.print(f"{p['severity']} [{p['profile']}]: {p['message']}",
                      style="red" if p["severity"] == "error" else "yellow")
        out.print(f"{'ok' if ok else 'invalid'}: {len(features)} feature(s), profile(s) "
                  f"{', '.join(checked)}, {len(problems)} problem(s)")
    raise typer.Exit(0 if ok else 1)


def _drift_problems(features, resolution, fdir) -> list:
    """Problems (key ``DRIFT``) for the features armed by ``resolution`` that drifted from the
    installed engine's source: errors in strict mode (that boot would stop), else warnings."""
    from dsv41_flags.errors import Problem

    return [Problem("DRIFT", f"profile {resolution.profile}",
                    f"feature {r.name!r} is {State.ARMED} in profile {resolution.profile} but its "
                    f"{drifted_text(r.target, r.missing)}"
                    + (" (strict mode: a boot would stop)" if resolution.strict else ""),
                    "error" if resolution.strict else "warning")
            for r in _feature_rows(features, resolution, fdir,
                                   compute(resolution, features, [], os.environ), armed_only=True)
            if r.state == State.DRIFTED]


@app.command(cls=_Command, short_help="Where a key's value comes from; the feature's declaration.")
def explain(key: str = typer.Argument(..., metavar="KEY",
                                      help="A feature name, a flag or option key, a reserved name "
                                           "(strict, rank_guard, ...) or a DSV41_ variable."),
            settings: Optional[List[Path]] = SettingsOpt, profile: Optional[str] = ProfileOpt,
            as_json: bool = JsonOpt) -> None:
    """The provenance chain of a key, lowest first (declared default, then each settings file
    [section], then the variable), the value that wins and where it comes from, every invalid
    layer marked as such; and the feature's declaration (summary, target, requires, version
    range, volatile, options, refs). Reserved settings (strict, rank_guard, log_level, ...) are
    explained the same way. Exit 1 when a layer of a shown key is invalid (a boot stops on it)."""
    features, resolution, _ = _load(settings, profile, as_json, allow_problems=True)
    wanted = key.strip().upper().removeprefix("DSV41_")
    feature = next((f for f in features if wanted == f.flag or wanted in f.keys()), None)
    try:
        field = _fleet_field(wanted)
    except FlagsError as exc:
        _fail(exc, as_json)
    if field is not None:
        _explain_fleet(resolution, field, as_json)
        return
    fleet_problems = []
    if feature is not None and resolution.reserved.get("FLEET"):
        # the fleet is the last layer: read once, as status and a boot read it; what kept it
        # from being read is said, and fails explain as it would stop the boot
        before = set(resolution.problems)
        resolution = fleet_boot(resolution, features, [], os.environ)
        fleet_problems = [p for p in resolution.problems if p not in before]
    if feature is not None:
        keys = feature.keys()
        shown = [wanted] if wanted != feature.flag else list(keys)
        chains = {k: (resolution.values[k],) + _kind_of(keys[k]) for k in shown}
        data: dict = {"feature": feature.name, "summary": feature.summary, "target": feature.target,
                      "requires": list(feature.requires), "engine": feature.engine,
                      "fixed_in": feature.fixed_in, "volatile": list(feature.volatile),
                      "refs": list(feature.refs), "after": list(feature.after), "live": feature.live,
                      "source_file": feature.source,
                      "options": [{"name": o.name, "key": feature.option_key(o), "kind": o.kind,
                                   "default": o.default, "minimum": o.minimum, "maximum": o.maximum,
                                   "choices": list(o.choices), "volatile": o.volatile, "help": o.help}
                                  for o in feature.options]}
    elif wanted in resolution.reserved_values:
        from dsv41_flags.settings import reserved_caster

        shown = [wanted]
        chains = {wanted: (resolution.reserved_values[wanted],) + reserved_caster(wanted)}
        data = {"reserved": wanted, "what": RESERVED[wanted].what}
    elif wanted in RESERVED:  # not a typed setting: the profile, the files, the snapshot, the table
        value = {"ENV": resolution.profile, "SETTINGS": list(resolution.files)}.get(
            wanted, resolution.reserved.get(wanted))
        what = RESERVED[wanted].what
        mine = [p for p in resolution.problems if p.key == wanted or p.key.startswith(wanted + ".")]
        bad = [p for p in mine if p.severity == "error"]
        if as_json:
            emit_json({"reserved": wanted, "what": what, "value": value,
                        "problems": [p.message for p in mine]})
        else:
            out.print(f"{wanted}: {what} = {value!r} (reserved name, never a flag; see docs/settings.md)",
                      highlight=False)
            for p in bad:
                err.print(f"error: {p.message}", style="red", highlight=False)
        if bad:  # as for every other key: an invalid value is an error
            raise typer.Exit(1)
        return
    else:
        known = sorted(k for f in features for k in f.keys())
        msg = (f"{quoted(key)} is no feature, flag, option or reserved key; known: {', '.join(known)}"
               + suggest(wanted, known + sorted(RESERVED)))
        _fail(FlagsError(msg), as_json)
        return
    # one path for every key kind: the chain, each layer valid or INVALID, the winner marked
    secrets = secret_names(resolution)
    data["keys"] = {k: masked_explanation(_explained(*chains[k])) if is_secret(k, secrets)
                    else _explained(*chains[k]) for k in shown}
    for o in data.get("options", ()):
        if is_secret(o["key"], secrets):
            o["default"] = MASK
    mine = [p for p in resolution.problems if p.key in shown] + [
        p for p in fleet_problems if p.key not in shown]
    bad = [p for p in mine if p.severity == "error"]
    data["problems"] = [p.message for p in mine]
    if as_json:
        emit_json(data)
        raise typer.Exit(1 if bad else 0)
    if feature is not None:
        f = feature
        out.print(f"{f.name}: {f.summary}", style="bold")
        out.print(f"  target {f.target}  engine {f.engine_label}  refs {', '.join(f.refs) or '-'}",
                  highlight=False)
        out.print(f"  requires: {', '.join(f.requires) or '-'}")
        out.print(f"  volatile: {', '.join(f.volatile) or '-'}   declared in {f.source}")
        out.print("  live-safe: yes (dsv41-flags set NAME=on|off --url switches it while serving)"
                  if f.live else "  live-safe: no (its flag is read at boot only)")
        for o in data["options"]:
            limits = "".join(f", {n} {o[n]}" for n in ("minimum", "maximum") if o[n] is not None)
            limits += f", one of {', '.join(o['choices'])}" if o["choices"] else ""
            out.print(f"  option {o['key']} ({o['kind']}, default {o['default']!r}{limits}"
                      f"{', volatile' if o['volatile'] else ''}): {o['help']}")
    else:
        out.print(f"{wanted}: {data['what']} (reserved name, never a flag; see docs/settings.md)",
                  style="bold", highlight=False)
    for p in bad:
        err.print(f"error: {p.message}", style="red", highlight=False)
    for p in mine:
        if p.severity != "error":
            err.print(f"warning: {p.message}", style="yellow", highlight=False)
    for k in shown:
        e = data["keys"][k]
        invalid = [layer["source"] for layer in e["layers"] if not layer["valid"]]
        tail = (f"; invalid layer(s): {', '.join(invalid)}: a boot stops on them" if invalid else "")
        out.print(f"  {k} = {e['value']!r}  (from {e['source']}{tail})", highlight=False)
        for i, layer in enumerate(e["layers"]):
            mark = ("  <- wins" if layer["wins"] else "") if layer["valid"] else \
                f"  <- INVALID: {layer['error']}"
            out.print(f"    {i + 1}. {layer['source']}: {layer['raw']!r}{mark}", highlight=False)
    if bad:
        raise typer.Exit(1)


def _fleet_field(wanted: str) -> str | None:
    """The fleet setting ``wanted`` names (upper case, ``DSV41_`` cut): ``""`` for the whole
    table (``FLEET``), a field for ``FLEET.URL``, ``FLEET_URL`` or ``FLEET.LABELS.CLUSTER``
    (``labels``), None for any other key."""
    from dsv41_flags.fleet_settings import TABLE, FleetSettings

    if wanted == TABLE:
        return ""
    names = [*FleetSettings.model_fields, "token"]
    for sep in (".", "_"):
        if wanted.startswith(TABLE + sep):
            rest = wanted[len(TABLE) + 1:].lower()
            for name in names:
                if rest == name or rest.startswith(name + "."):
                    return name
            if sep == ".":   # fleet.X names the table: an unknown field is said as such
                raise FlagsError(f"fleet.{rest} is not a fleet setting; accepted: "
                                 f"{', '.join(names)}" + suggest(rest, names))
    return None


def _explain_fleet(resolution, field: str, as_json: bool) -> None:
    """``explain fleet`` / ``explain fleet.FIELD``: each fleet setting's value (a URL masked,
    the token never), where it comes from (a settings file's ``[PROFILE.fleet]``, a
    ``DSV41_FLEET_*`` variable, or the declared default) and what it accepts. Exit 1 on a
    problem of a shown field."""
    from dsv41_flags.fleet_settings import TOKEN_VAR, FleetSettings, accepted

    table = resolution.reserved.get("FLEET") or {}
    values, sources = table.get("settings", {}), table.get("sources", {})
    names = [field] if field else [*FleetSettings.model_fields, "token"]
    problems = [p for p in resolution.problems if p.key == "FLEET" or p.key.startswith("FLEET.")
                or p.key.startswith("DSV41_FLEET_")]
    if field:
        problems = [p for p in problems if f"fleet.{field}" in p.message] or problems
    bad = [p for p in problems if p.severity == "error"]
    rows = []
    for name in names if table or not bad else ():   # an invalid table: its errors alone
        if name == "token":
            token_file = values.get("token_file") or ""
            source = (f"env {TOKEN_VAR} (it wins over fleet.token_file)" if os.environ.get(TOKEN_VAR)
                      else f"the file fleet.token_file {token_file}" if token_file else "not set")
            rows.append({"key": "fleet.token",
                         "value": MASK if os.environ.get(TOKEN_VAR) or token_file else "",
                         "source": source,
                         "accepted": f"a secret: only the variable {TOKEN_VAR} or fleet.token_file"
                                     " (Unleash only)"})
            continue
        info = FleetSettings.model_fields[name]
        value = values.get(name, None if info.is_required() else
                           info.get_default(call_default_factory=True))
        if name == "url" and value:
            value = masked_url(value)
        rows.append({"key": f"fleet.{name}", "value": value,
                     "source": sources.get(name, "declared default" if table else "(no fleet table)"),
                     "accepted": accepted(name)})
    data = {"reserved": "FLEET", "table": bool(table), "where": "" if not table else
            _fleet_where(resolution), "fields": rows, "problems": [p.message for p in problems]}
    if as_json:
        emit_json(data)
        raise typer.Exit(1 if bad else 0)
    if not table and bad:
        out.print("fleet: the fleet table is invalid (a boot stops on it; errors below): no "
                  "value of it is in effect", highlight=False)
    elif not table:
        out.print("fleet: no fleet table ([PROFILE.fleet] in a settings file or DSV41_FLEET_* "
                  "variables): no flag service is read (docs/fleet.md)", highlight=False)
    else:
        out.print(f"fleet: {data['where']}; precedence of a flag: declared default < settings "
                  "file < profile < DSV41_* variable < fleet (docs/fleet.md)", highlight=False)
    for row in rows:
        out.print(f"  {row['key']} = {row['value']!r}  (from {row['source']}); accepted: "
                  f"{row['accepted']}", highlight=False)
    for p in bad:
        err.print(f"error: {p.message}", style="red", highlight=False)
    if bad:
        raise typer.Exit(1)


def _fleet_where(resolution) -> str:
    from dsv41_flags.fleet import configured

    settings = configured(resolution)
    return settings.where() if settings is not None else ""


def _kind_of(option) -> tuple:
    """``(kind, caster)`` of a feature key: its flag (``option`` None) or an option."""
    from dsv41_flags.values import Kind, cast_bool

    return (Kind.BOOL, cast_bool) if option is None else (option.kind, option.cast)


def _explained(resolved, kind: str, caster) -> dict:
    """``resolved`` as a dict plus ``layers``: per chain entry its source, raw value, whether it
    is valid (cast as the resolution casts it: ``kind`` and ``caster``) and the reason when not,
    and which one wins (the valid layer the resolved value came from). The same for flags,
    options and reserved settings."""
    from dsv41_flags.settings import cast_layer
    from dsv41_flags.values import CastError

    key = resolved.key
    layers = []
    for source, raw in resolved.chain:
        try:
            cast_layer(key, kind, caster, source, raw)
            layers.append({"source": source, "raw": jsonable(raw), "valid": True, "error": "",
                           "wins": False})
        except CastError as exc:
            layers.append({"source": source, "raw": jsonable(raw), "valid": False,
                           "error": f"accepted: {exc.accepted}", "wins": False})
    for layer in reversed(layers):
        if layer["valid"] and layer["source"] == resolved.source:
            layer["wins"] = True
            break
    return {**resolved_to_dict(resolved), "layers": layers}


@app.command(short_help="The launch fingerprint; --diff against a sidecar.",
             context_settings={"allow_extra_args": True},
             options_metavar="[OPTIONS] [-- CMD [ARGS]...]")
def fingerprint(ctx: typer.Context, settings: Optional[List[Path]] = SettingsOpt,
                profile: Optional[str] = ProfileOpt,
                explain_: bool = typer.Option(False, "--explain", help="Show every key in and out."),
                diff: Optional[Path] = typer.Option(None, "--diff", metavar="SIDECAR",
                                                    help="Compare with this sidecar, key by key."),
                write: Optional[Path] = typer.Option(None, "--write", metavar="FILE",
                                                     help="Write a sidecar here (atomic)."),
                as_json: bool = JsonOpt) -> None:
    """The launch fingerprint of this environment and settings, and of the launch command line
    CMD ARGS given after --.

    --diff exits 0 for the same launch, 1 for a different one, 2 when the sidecar cannot be read
    as one."""
    from dsv41_flags.cache_keeping import diff as payload_diff, read_sidecar, write_sidecar  # here: status skips it

    argv = list(ctx.args)
    features, resolution, _ = _load(settings, profile, as_json)
    fp = compute(resolution, features, argv, os.environ)
    data: dict = {"fingerprint": fp.digest}
    if explain_:
        data["payload"] = fp.payload
        data["included"] = fp.included
        data["excluded"] = fp.excluded
        data["prefixes"] = prefix_sources(resolution)
    if diff is not None:
        side = read_sidecar(diff)
        if side.payload is None:
            data["diff"] = {"sidecar": str(diff), "same": False, "reason": side.error}
        else:
            secrets = secret_names(resolution)
            changes = masked_changes(payload_diff(side.payload, fp.payload), secrets,
                                     lambda argv: masked_argv(argv, secrets))
            data["diff"] = {"sidecar": str(diff), "same": side.digest == fp.digest, "changes": changes}
    if write:  # after --diff: comparing with the file being replaced must see the old one
        try:
            write_sidecar(write, fp)
        except OSError as exc:
            _fail(FlagsError(f"--write {quoted(str(write))}: cannot write the sidecar: "
                             f"{exc.strerror or exc}"), as_json)
        data["written"] = str(write)
    if as_json:
        emit_json(data)
    elif "diff" in data and "reason" in data["diff"]:
        # the sidecar could not be read: the error alone (no fingerprint printed before it)
        err.print(f"error: cannot compare: {data['diff']['reason']}", style="red", highlight=False)
    else:
        out.print(fp.digest)
        if write:
            err.print(f"wrote the sidecar {write}", highlight=False)
        if explain_:
            for prefix, why in data["prefixes"].items():
                out.print(f"  prefix   {prefix}  ({why})", highlight=False)
            for part in ("argv", "env", "settings"):
                val = fp.payload[part]
                items = val.items() if isinstance(val, dict) else [("argv", val)]
                for k, v in items:
                    why = fp.included.get(k, "")
                    name = f"{part:8} {k}" if part != k else f"{part:8}"  # no "argv argv"
                    out.print(f"  in   {name} = {v!r}" + (f"  ({why})" if why else ""),
                              highlight=False)
            for k, why in sorted(fp.excluded.items()):
                out.print(f"  out  {k}: {why}", highlight=False)
        if "diff" in data:
            d = data["diff"]
            if d.get("same"):
                out.print(f"same launch as {diff}")
            elif "changes" in d:
                for c in d["changes"]:
                    name = c["part"] if c["part"] == c["key"] else f"{c['part']} {c['key']}"
                    out.print(f"  {name}: {c['old']!r} -> {c['new']!r}", highlight=False)
                if not d["changes"]:
                    out.print(f"different launch: {diff} records fingerprint {side.digest[:16]}… "
                              f"for the same payload (edited by hand?)")
    if "diff" in data and not data["diff"].get("same"):
        # 1: a different launch; 2: the sidecar could not be read as one
        raise typer.Exit(1 if "changes" in data["diff"] else 2)


@app.command("diff", cls=_Command, short_help="What differs between two profiles, fingerprint included.")
def diff_profiles(profile_a: str = typer.Argument(..., metavar="PROFILE_A", help="A profile."),
                  profile_b: str = typer.Argument(..., metavar="PROFILE_B", help="Another profile."),
                  settings: Optional[List[Path]] = SettingsOpt, as_json: bool = JsonOpt) -> None:
    """Flags and options that differ between two profiles, and whether their fingerprints differ
    (an A/B boot across them re-tunes when they do)."""
    from dsv41_flags.cache_keeping import diff as payload_diff

    fa, ra, _ = _load(settings, profile_a, as_json)
    fb, rb, _ = _load(settings, profile_b, as_json)
    keys = sorted(set(ra.values) | set(rb.values))
    secrets = secret_names(ra)
    changes = [{"key": k, "a": _value(ra, k), "b": _value(rb, k),
                "a_source": ra.values[k].source if k in ra.values else None,
                "b_source": rb.values[k].source if k in rb.values else None}
               for k in keys if _value(ra, k) != _value(rb, k)]
    changes = [{**c, "a": MASK, "b": MASK} if is_secret(c["key"], secrets) else c for c in changes]
    fpa, fpb = compute(ra, fa, [], os.environ), compute(rb, fb, [], os.environ)
    data = {"a": profile_a, "b": profile_b, "changes": changes, "fingerprint_a": fpa.digest,
            "fingerprint_b": fpb.digest, "fingerprints_differ": fpa.digest != fpb.digest,
            "payload_changes": payload_diff(fpa.payload, fpb.payload)}
    if as_json:
        emit_json(data)
        return
    for c in changes:
        out.print(f"  {c['key']}: {c['a']!r} ({profile_a}) vs {c['b']!r} ({profile_b})")
    if not changes:
        out.print("  no flag or option differs")
    out.print("fingerprints differ: caches re-tune across these profiles" if data["fingerprints_differ"]
              else "same fingerprint: caches are reused across these profiles")


@app.command(short_help="Drift check of the features against the installed engine, or against "
                        "engine releases (--engine).")
def check(all_: bool = typer.Option(False, "--all", help="Check every feature, not only armed ones."),
          live: bool = typer.Option(False, "--import",
                                    help="Import the targets (in a subprocess) instead of reading their source."),
          live_extensions: bool = typer.Option(
              False, "--live-extensions",
              help="Import each compiled extension module a requirement reaches (in a subprocess) "
                   "and look its names up live, instead of leaving them undecided."),
          engine: Optional[List[str]] = typer.Option(
              None, "--engine", metavar="SPEC",
              help="Check against this engine release instead of the installed one: a wheel file, a "
                   "source tree (site-packages or checkout), or a requirement NAME==VERSION (fetched "
                   "with pip --no-deps into the cache and reused). Repeat it for a matrix."),
          settings: Optional[List[Path]] = SettingsOpt, profile: Optional[str] = ProfileOpt,
          as_json: bool = JsonOpt) -> None:
    """Drift check without importing the engine: each armed feature's target source is parsed and
    every required class, function, method, parameter and module-level name gets a verdict: ok,
    missing, or undecided when the source cannot tell (never counted as ok). The installed engine
    version is checked against the feature's range. A target source that cannot be read or parsed
    is reported as drift. An undecided requirement is listed, counted neither as ok nor as drift
    (in JSON "ok" is false and "drifted" false): the live check at import decides it; --import
    decides it now. A name of a compiled extension module is in no source: --live-extensions
    imports that module in a subprocess and decides its names live.

    With --engine (the upgrade gate): one row per feature, one column per release, each cell ok,
    drifted (with the closest existing name), undecided, out-of-range, fixed-upstream or
    unreadable. Exit 1 on drift, on a settings error (which features a boot arms is then unknown,
    as it would stop), or when a checked feature would not install on a named release; exit 2
    for an empty SPEC."""
    if engine and any(not spec.strip() for spec in engine):
        _usage_error("--engine", "--engine got an empty SPEC: give a wheel file, a directory or "
                     "NAME==VERSION", as_json)
    features, resolution, fdir = _load(settings, profile, as_json)
    chosen = [f for f in features if all_ or resolution.flag(f)]
    if engine:
        if live or live_extensions:
            _fail(FlagsError(f"{'--import' if live else '--live-extensions'} checks the installed "
                             "engine; it cannot be combined with --engine (releases are read, "
                             "never imported)"), as_json)
        if not chosen:  # nothing to check: say so before fetching or reading any release
            if as_json:
                emit_json({"ok": True, "mode": "releases", "releases": [], "features": []})
            else:
                out.print("no feature checked (none armed; use --all)")
            raise typer.Exit(0)
        _check_releases(chosen, list(engine), as_json)
        return
    results = []
    for f in chosen:
        verdicts, source = _verdicts_of(f, fdir, live=live, live_extensions=live_extensions)
        missing, undecided = split_verdicts(f, verdicts, by_import=live)
        results.append({"feature": f.name, "target": f.target, "source": source, "missing": missing,
                        "undecided": undecided, "verdicts": [v.to_dict() for v in verdicts],
                        "fixed_upstream": fixed_upstream(f) or "", "drifted": bool(missing),
                        "ok": not (missing or undecided)})
    ok = all(r["ok"] for r in results)
    drifted = any(r["drifted"] for r in results)
    if as_json:
        emit_json({"ok": ok, "drifted": drifted, "mode": "import" if live else "static",
                    "features": results})
    else:
        for r in results:
            line = "; ".join(([f"DRIFT: {', '.join(r['missing'])}"] if r["missing"] else []) +
                             ([f"UNDECIDED: {', '.join(r['undecided'])}"] if r["undecided"] else [])) \
                or Presence.OK
            out.print(f"{r['feature']:20} {r['target']}  {line}")
            for v in r["verdicts"]:
                if v["verdict"] != Presence.OK:
                    hint = f"; closest: {v['closest']}" if v["closest"] else ""
                    out.print(f"    {v['verdict']:9} {v['requirement']}: {v['why']}{hint}")
        if not results:
            out.print("no feature checked (none armed; use --all)")
        if any(r["undecided"] for r in results):
            err.print(_UNDECIDED_NOTE)
    raise typer.Exit(1 if drifted else 0)


def _check_releases(chosen, specs: list[str], as_json: bool) -> None:
    """The upgrade gate: a matrix of features x releases (see ``_gate``); exit 1 when a chosen
    feature would not install on a named release."""
    from dsv41_flags.upgrade_gate.matrix import matrix
    from dsv41_flags.upgrade_gate.releases import open_release

    engines = tuple(dict.fromkeys(f.engine_requirement.name for f in chosen if f.engine))
    tops = tuple(dict.fromkeys(f.target.split(".")[0] for f in chosen))
    releases = [open_release(s, engines, tops) for s in specs]
    rows = matrix(chosen, releases)
    ok = not any(c["state"].failing for r in rows for c in r["cells"])
    if as_json:
        emit_json({"ok": ok, "mode": "releases",
                    "releases": [{"spec": r.spec, "label": r.label, "name": r.name,
                                  "version": r.version, "where": r.where, "error": r.error}
                                 for r in releases],
                    "features": rows})
        raise typer.Exit(0 if ok else 1)
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=True)
    table.add_column("feature", no_wrap=True)
    for r in releases:
        table.add_column(safe(r.label), overflow="fold")
    styles = {Cell.OK: "green", Cell.FIXED_UPSTREAM: "cyan", Cell.NOT_APPLICABLE: "dim"}
    for row in rows:
        table.add_row(safe(row["feature"]), *[
            Text.assemble(safe(c["state"], styles.get(c["state"], "red")), "\n", safe(c["detail"]))
            for c in row["cells"]])
    wide = out.is_terminal or os.environ.get("COLUMNS")
    shown = console(width=None if wide else 60 + 40 * len(releases), soft_wrap=False)
    shown.print(table)
    if shown.failure is not None:
        out.lost(shown.failure)
    if not rows:
        out.print("no feature checked (none armed; use --all)")
    raise typer.Exit(0 if ok else 1)


def _drift_of(feature, fdir, *, live: bool = False) -> tuple[list[str], list[str], str | None]:
    """``(missing, undecided, source)`` (``drift.split_verdicts``) of ``feature``, from the
    target's source (``source`` = its file, None when not found) or, with ``live``, from importing
    it in a separate process (``source`` None)."""
    verdicts, source = _verdicts_of(feature, fdir, live=live)
    return (*split_verdicts(feature, verdicts, by_import=live), source)


def _verdicts_of(feature, fdir, *, live: bool = False, live_extensions: bool = False) -> tuple:
    """``(verdicts, source)``: one ``drift.Verdict`` per requirement and the target's source file:
    by import in a separate process (``live``: ``drift.verdicts_by_import``), else from the
    source (``static_check``; ``live_extensions``: compiled modules looked at live)."""
    if live:
        return verdicts_by_import(feature, fdir), None
    from dsv41_flags.upgrade_gate.static_check import Checker, check_feature

    result = check_feature(feature, Checker(live_extensions=live_extensions))
    return list(result.verdicts), result.source


@app.command(short_help="Run a command with dsv41_flags active in every Python process.",
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="[OPTIONS] -- CMD [ARGS]...")
def run(ctx: typer.Context, settings: Optional[List[Path]] = SettingsOpt,
        profile: Optional[str] = ProfileOpt) -> None:
    """Run CMD with its ARGS (after --) so that every Python process started under it activates
    dsv41_flags at interpreter start: a bootstrap sitecustomize goes first on PYTHONPATH and runs
    the user's own sitecustomize, if any, with all its effects kept.

    Resolves once here, checks the armed features for drift as status does, and refuses to start
    (exit 1, with the message status gives) a launch that strict mode would stop; otherwise hands
    the snapshot down. A Python command whose interpreter options skip the bootstrap (-E, -I, -S,
    also joined as -Es, -IS, or on a script's #! line) is refused in strict mode (exit 1) and
    warned about otherwise. Exit code and signals pass through (the command replaces this
    process)."""
    from dsv41_flags.launcher import bootstrap_bypass, exec_command, interpreter_problem, prepare

    if not ctx.args:
        err.print("error: missing the command: dsv41-flags run [OPTIONS] -- CMD [ARGS]...",
                  highlight=False)
        raise typer.Exit(2)
    try:
        rt, env = prepare(settings, profile, list(ctx.args))
    except FlagsError as exc:
        _fail(exc, False)
    _refuse_blocked(rt, ctx.args[0])
    bypass = bootstrap_bypass(ctx.args, env)
    if bypass and rt.resolution.strict:
        err.print(f"error: {bypass}", style="red", highlight=False)
        err.print(f"error: not starting {ctx.args[0]} (strict mode)", style="red", highlight=False)
        raise typer.Exit(1)
    if bypass:
        err.print(f"warning: {bypass}; starting anyway (strict mode is off)", style="yellow",
                  highlight=False)
    armed = [f.name for f in rt.features.values() if rt.resolution.flag(f)]
    problem = interpreter_problem(ctx.args, os.environ) if armed else None
    if problem and rt.resolution.strict:
        err.print(f"error: {problem}", style="red", highlight=False)
        err.print(f"error: not starting {ctx.args[0]}: feature(s) {', '.join(armed)} armed and "
                  f"strict mode is on", style="red", highlight=False)
        raise typer.Exit(1)
    if problem:
        err.print(f"warning: {problem}; starting anyway (strict mode is off)", style="yellow",
                  highlight=False)
    try:
        exec_command(list(ctx.args), env)
    except FileNotFoundError:
        err.print(f"error: command not found: {ctx.args[0]}", style="red")
        raise typer.Exit(127) from None
    except OSError as exc:
        err.print(f"error: cannot run {ctx.args[0]}: {exc.strerror or exc}", style="red")
        raise typer.Exit(126) from None


@app.command(short_help="Start the engine's server with dsv41_flags; --cpu on a CPU-only machine.",
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="[OPTIONS] [SERVER OPTIONS]...")
def serve(ctx: typer.Context, settings: Optional[List[Path]] = SettingsOpt,
          profile: Optional[str] = ProfileOpt,
          cpu: bool = typer.Option(False, "--cpu", help="Serve on this machine's CPU: the package's "
                                   "CPU platform, CPU options and, without --model-path, the "
                                   "shipped tiny model (docs/quickstart.md).")) -> None:
    """Replace this process with the engine's server (``EngineAdapter.server_command``: for
    sglang, ``python -m sglang.launch_server SERVER OPTIONS``), its options passed on unchanged;
    ``--cpu`` adds what a CPU-only machine needs, each only where not given. The launch is
    resolved once, here: a bad settings file or value, or a launch that strict mode would stop,
    is refused before the server starts (exit 1, with the message status gives); then it is
    handed to every process of the server as ``dsv41-flags run`` does (the snapshot, and the
    bootstrap for the processes sglang's plugin loader never enters: tokenizer workers)."""
    from dsv41_flags.engine import adapter
    from dsv41_flags.launcher import exec_command, prepare

    engine = adapter()
    try:
        argv, env = engine.server_command(list(ctx.args), cpu=cpu)
        rt, env = prepare(settings, profile, argv[1:], env)
    except FlagsError as exc:
        _fail(exc, False)
    _refuse_blocked(rt, f"{engine.name}'s server")
    try:
        exec_command(argv, env)
    except OSError as exc:
        err.print(f"error: cannot run {argv[0]}: {exc.strerror or exc}", style="red")
        raise typer.Exit(126) from None


def main() -> None:
    """Console-script entry point (the exit statuses: ``_Group.main``)."""
    app()
