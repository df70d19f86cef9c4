"""The `delaylab` command line."""

from __future__ import annotations

import argparse
import os
import sys


PLUGIN_HELP = ("a plugin: a .py file or a module defining delaylab_algorithms() (repeatable); its algorithms "
               "are registered like the built-in ones (installed plugins of the entry-point group "
               "delaylab.algorithms are always loaded)")


def _add_plugin(parser) -> None:
    parser.add_argument("--plugin", action="append", default=[], metavar="PATH_OR_MODULE", help=PLUGIN_HELP)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="delaylab", description="Check distributed-optimisation theory against simulation.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="run the scenarios and print predicted vs measured (exit 0 iff all pass)")
    _add_plugin(v)
    v.add_argument("--json", action="store_true", help="print the checks as a JSON list instead of a table")
    v.add_argument("--out", default="out/verify", help="folder for checks, figure and metadata (default: out/verify)")
    v.add_argument("--no-out", action="store_true", help="write nothing to disk")
    v.add_argument("--scenario", action="append", help="run only this scenario (repeatable); default: all")
    v.add_argument("--list", action="store_true", help="list the scenarios and exit")
    v.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    v.add_argument("--algorithm", action="append", default=None, metavar="NAME",
                   help="check only this algorithm (repeatable; a registered name or one a --plugin adds); "
                        "default: all")
    v.add_argument("--step-scale", type=float, default=1.0, metavar="S",
                   help="multiply every scenario's step by S (e.g. 0.25): an O(γ) offset shrinks with it, a bias "
                        "does not (the cycle map and noise floor keep their own steps)")
    v.add_argument("--mutants", action="store_true",
                   help="also check the same runs under plausible wrong theories and print the mutation score "
                        "(exit 1 if some wrong theory passes every check)")
    _run_parser(sub)
    sh = sub.add_parser("show", help="summarise a run folder and redraw its figure")
    sh.add_argument("folder", help="a folder `delaylab run` wrote")
    sh.add_argument("--out", default=None, help="where to draw the figure (default: FOLDER/figure.png)")
    sh.add_argument("--json", action="store_true", help="print the folder's summary as JSON instead")
    _add_plugin(sh)
    from delaylab.paper_figures import FIGURES

    names = "\n".join(f"  {k:6s} {desc}" for k, (_, desc) in FIGURES.items())
    f = sub.add_parser("figure", help="reproduce a paper figure (PNG + data + findings text)",
                       description="Figures:\n" + names, formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("name", choices=sorted(FIGURES), help="which figure")
    _add_plugin(f)
    f.add_argument("--quick", action="store_true", help="a smaller preset (minutes on 2 cores)")
    f.add_argument("--preset", default=None,
                   help="a named preset (every figure has quick and full; r5 also medium and control, deahes "
                        "quick-stale and full-stale)")
    f.add_argument("--out", default=None, help="output folder (default: out/figures/NAME)")
    f.add_argument("--redraw", metavar="NPZ", default=None,
                   help="redraw the figure, CSV and findings text from the .npz an earlier run wrote, "
                        "without computing")
    f.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="compute with N cooperating processes (default 1): N - 1 helpers take the figure's "
                        "units of work (r4's settings, r5's methods, hetero-frontier's cells) that no other "
                        "process has claimed, sharing the parts through --out; the output is the same as with "
                        "one process. At most one per core")
    f.add_argument("--estimate", action="store_true",
                   help="predict the preset's wall time on this machine from a calibration (each run's "
                        "compilation, and a long run's first segments; parts a stopped run left in --out are reused) and "
                        "write nothing but the estimate, which the run then reads to show parts and time left")
    return p


def _run_parser(sub) -> None:
    from delaylab import config as C

    r = sub.add_parser(
        "run", help="run a config (TOML file and/or flags) into a folder; resumable",
        description="Run an algorithm on a problem along a schedule, or a sweep over step sizes and seeds, "
                    "into a folder (config, versions, git revision, checkpoint, metrics, figure). Settings come "
                    "from CONFIG (TOML: top-level keys, [problem], [schedule]) and then from the flags below; "
                    "lists are comma-separated (--stepsize 0.01,0.02).",
        epilog="exit status: 0 finished (a sweep in which only some runs diverged included); 2 refused before "
               "running (a bad setting, path or checkpoint); 3 the run, or every run of the sweep, diverged "
               "(a result: summary.json says where); 130 interrupted (resume with --resume DIR)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("config", nargs="?", help="a TOML file (docs/runs.md has an example)")
    r.add_argument("--out", default=None, help="the run folder (default: out/runs/NAME)")
    r.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the run in DIR from its last checkpoint (refused if the config differs)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    _add_plugin(r)
    g = r.add_argument_group("settings (each overrides CONFIG)")
    for name, cls in C.flag_fields():
        field = name.split(".")[-1]
        text = C.field_help(cls).get(field, "")
        g.add_argument(f"--{name}", dest=f"set:{name}", default=None, metavar=field.upper(),
                       help=(text + " " if text else "") + f"(default {getattr(cls(), field)!r})")


def _cmd_run(args) -> int:
    from delaylab import config as C
    from delaylab import runs
    from delaylab.sim import store

    flags = {k[4:]: v for k, v in vars(args).items() if k.startswith("set:") and v is not None}
    if args.plugin:  # recorded in the run's config, so that show and --resume load them again
        flags["plugins"] = list(args.plugin)
    try:
        if args.resume is not None:
            folder = args.resume
            saved_path = os.path.join(folder, "config.toml")
            if not os.path.exists(saved_path):
                raise C.ConfigError(f"--resume {folder}: no config.toml there; it is not a folder `delaylab run` wrote")
            saved = C.read_toml(saved_path)
            asked = C.read_toml(args.config) if args.config else saved
            asked = C.from_flags(flags, base=asked) if flags else asked
            diff = C.differences(saved, asked)
            if diff:
                raise C.ConfigError(f"--resume {folder}: the config differs from the one the run was started with "
                                    "(saved → now):\n  " + "\n  ".join(diff))
            st = runs.status(folder)
            if st["status"] in runs.FINISHED:
                print(f"{folder}: already finished ({st['status']})", file=sys.stderr)
                print(store.dumps_json(st) if args.json else f"{st['status']}; final loss: {st['final_loss']}")
                return runs.EXIT_DIVERGED if st["status"] == "diverged" else 0
            cfg, resume = saved, True
        else:
            cfg = C.read_toml(args.config) if args.config else C.RunConfig()
            cfg = C.from_flags(flags, base=cfg) if flags else cfg
            folder = args.out or os.path.join("out", "runs", cfg.name)
            if not args.out:  # the default folder's parents are this project's to create
                os.makedirs(os.path.dirname(folder), exist_ok=True)
            runs.check_out(folder, flag="--out" if args.out else "the default output folder")
            if os.path.exists(os.path.join(folder, "config.toml")):
                st = runs.status(folder)["status"]
                raise C.ConfigError(f"{folder} already holds a run ({st}); continue it with --resume {folder}, "
                                    "or choose another --out")
            resume = False
        try:
            summary = runs.execute(cfg, folder, resume=resume, quiet=args.quiet)
        except KeyboardInterrupt:
            print(f"\ndelaylab run: interrupted; the finished segments are in {folder}/checkpoint.npz; "
                  f"continue with `delaylab run --resume {folder}`", file=sys.stderr)
            return 130
    except (C.ConfigError, runs.RunError) as err:
        print(f"delaylab run: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(store.dumps_json(summary))
    else:
        where = ""
        if "divergence" in summary:
            dv = summary["divergence"]
            where = f" at event {dv['event']} (worker {dv['worker']}, time {dv['time']:g}); last finite"
        print(f"{cfg.name}: {summary['status']}{where}, final loss {summary['final_loss']}; wrote {folder}")
    return runs.EXIT_DIVERGED if summary["status"] == "diverged" else 0


def _estimate(fig, preset: str, out: str) -> int:
    from delaylab import paper_figures
    fmt = paper_figures.format_seconds

    print(f"{fig.name} --preset {preset}: calibrating (each long run compiled and cut after its first segments; "
          "numbers the figure prints meanwhile may come from cut runs, not results)", flush=True)
    try:
        e = fig.estimate(preset, out)
    except paper_figures.MixedConvolution as err:
        print(f"delaylab figure: {err}", file=sys.stderr)
        return 2
    reused = f", {e['reused']} of them stored by a stopped run and reused" if e["reused"] else ""
    print(f"{fig.name} --preset {preset}: predicted wall time on this machine {fmt(e['predicted'])} "
          f"({fmt(e['simulated'])} in {e['runs']} runs, simulated or on real workers, {e['cut']} of them timed on "
          f"their first segments or results; {fmt(e['other'])} outside them, measured); {e['parts']} part{'s' if e['parts'] != 1 else ''}{reused}. "
          f"The calibration took {fmt(e['calibration'])}.")
    return 0


def _cmd_figure(args) -> int:
    import jax

    with jax.enable_x64(True):  # the figures compute in float64
        return _figure(args)


def _figure(args) -> int:
    from delaylab import paper_figures

    fig = paper_figures.figure(args.name)
    out = args.out or f"out/figures/{args.name}"
    from delaylab.runs import file_in_the_way

    bad = file_in_the_way(out)
    if bad:
        print(f"delaylab figure: {bad}", file=sys.stderr)
        return 2
    if args.redraw is not None:
        if args.estimate:
            print("delaylab figure: --redraw computes nothing, so there is nothing to --estimate; drop one",
                  file=sys.stderr)
            return 2
        if args.quick or args.preset is not None or args.jobs != 1:
            print("delaylab figure: --redraw takes the preset from the .npz it reads and computes nothing; "
                  "drop --quick/--preset/--jobs", file=sys.stderr)
            return 2
        if not os.path.isfile(args.redraw):
            print(f"delaylab figure: --redraw {args.redraw!r}: no such file (expected the .npz an earlier "
                  f"`delaylab figure {args.name}` wrote)", file=sys.stderr)
            return 2
        try:
            data = fig.load(args.redraw)
        except (KeyError, ValueError, OSError) as err:
            print(f"delaylab figure: --redraw {args.redraw!r} is not a {args.name} data file ({err})", file=sys.stderr)
            return 2
        path = fig.write(out, data=data)
        print(f"{args.name}: redrew {path} from {args.redraw}")
        return 0
    if args.preset is not None and args.quick:
        print("delaylab figure: give --preset or --quick, not both", file=sys.stderr)
        return 2
    try:
        preset, _ = fig.preset(args.preset, quick=args.quick)
    except ValueError as err:
        print(f"delaylab figure: {err}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"delaylab figure: --jobs must be at least 1; got {args.jobs}", file=sys.stderr)
        return 2
    if args.jobs > 1 and not fig.units:
        print(f"delaylab figure: {args.name} computes its parts in one sequence, so --jobs would not make it "
              "faster (a helper would only wait); drop --jobs", file=sys.stderr)
        return 2
    if args.estimate:
        if args.jobs != 1:
            print("delaylab figure: --estimate calibrates one process; drop --jobs (with N processes on N "
                  "cores a preset whose units are many and alike takes about 1/N of the estimate)", file=sys.stderr)
            return 2
        return _estimate(fig, preset, out)
    try:
        path = fig.write(out, preset=preset, jobs=args.jobs, plugins=args.plugin or ())
    except paper_figures.MixedConvolution as err:
        print(f"delaylab figure: {err}", file=sys.stderr)
        return 2
    print(f"{args.name}: wrote {path} (data and findings text beside it)")
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from delaylab import plugins

    try:
        plugins.load_all(args.plugin)
    except plugins.PluginError as err:
        print(f"delaylab {args.command}: {err}", file=sys.stderr)
        return 2
    if args.command == "run":
        return _cmd_run(args)
    if args.command == "show":
        from delaylab import runs

        from delaylab.sim import store

        try:
            if args.json:
                print(store.dumps_json(runs.status(args.folder)))
                return 0
            return runs.show(args.folder, out=args.out)
        except (runs.RunError, ValueError) as err:
            print(f"delaylab show: {err}", file=sys.stderr)
            return 2
    if args.command == "verify":
        from delaylab import scenarios, verify

        if args.list:
            for s in scenarios.SCENARIOS:
                print(f"{s.name:15s} {s.description}")
            print(f"{verify.ORBIT_SCENARIO:15s} finite-step orbit of every rule vs the exact cycle map (1e-8)")
            print(f"{verify.NOISE_SCENARIO:15s} noise floors of vanilla and Rescaled vs V σ²/(4Γ), and their ratio τ_A/τ_H")
            return 0
        from delaylab.runs import file_in_the_way

        bad = None if args.no_out else file_in_the_way(args.out)
        if bad:
            print(f"delaylab verify: {bad}", file=sys.stderr)
            return 2
        try:
            from delaylab import paper_figures

            return verify.run_verify(None if args.no_out else args.out, as_json=args.json,
                                     names=args.scenario, quiet=args.quiet or args.json, mutants=args.mutants,
                                     step_scale=args.step_scale, only=args.algorithm,
                                     figure=lambda out: paper_figures.figure("r1").write(out, quiet=True))
        except ValueError as err:
            print(f"delaylab verify: {err}", file=sys.stderr)
            return 2
    if args.command == "figure":
        return _cmd_figure(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
