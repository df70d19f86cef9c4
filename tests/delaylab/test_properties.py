"""Generated bad input (issue 25, part 4): command-line values, TOML documents and the public
constructors' arguments drawn by hypothesis; each must be accepted, or refused with the project's
own error (ValueError, of which ConfigError is one, or TypeError for a wrong type) in one line that
names the argument: never a traceback from inside jax, numpy or matplotlib. The examples are kept
small (no schedule of more than 10^5 events is built) so that each property runs in seconds; the
number of examples per property is its ``max_examples``."""

import math
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delaylab import algos
from delaylab import config as C
from delaylab.sim import problems, schedules

# derandomized (the same examples on every run, as the suite's numbers are) and no example database
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                derandomize=True, database=None)

# strings a user might type for a value, valid and not
WORDS = st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1", "2", "3.5", "1e309", "1e-320", "-0", "abc", "",
                         " ", "[]", "1,2", "1,2,", "1,,2", "true", "none", "0x10", "1_000", "1e3", "4,4,4,4",
                         "exponential", "asgd", "quadratic"])
FLAGS = [name for name, _ in C.flag_fields()]


def _one_line_naming(err: Exception, *names: str) -> None:
    msg = str(err)
    assert msg and "\n" not in msg.strip(), f"not one line: {msg!r}"
    assert any(n in msg for n in names), f"{msg!r} names none of {names}"


def _small(cfg) -> bool:
    return cfg.schedule.events <= 100_000 and cfg.problem.workers <= 64 and cfg.problem.dim <= 2_000


EXTREMES = st.sampled_from(["5e-324", "1e308", "-1e308", "1e12", "1e13", "100000000", "50000001", "0.0", "4",
                             "1,2,3,4", "1,nan,2,3", "0.5", "0.01,0.02"])
VALUES = st.one_of(WORDS, EXTREMES, st.text(alphabet="0123456789.,-einaf ", max_size=6))
SETTABLE = [f for f in FLAGS if f != "problem.kind"]


def _default(flag: str) -> str:
    """The flag's default value as one would type it (so that some draws are valid ones)."""
    obj = C.RunConfig()
    for part in flag.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if isinstance(obj, tuple):
        return ",".join(str(v) for v in obj)
    return str(obj)


# a flag and a value: its default half of the time (so that some examples get as far as building),
# else a drawn one
FLAG_VALUE = st.sampled_from(SETTABLE).flatmap(lambda f: st.tuples(st.just(f), st.one_of(st.just(_default(f)), VALUES)))


@settings(max_examples=150, **SETTINGS)
@given(kind=st.sampled_from(["quadratic", "logistic", "mlp"]),
       flags=st.lists(FLAG_VALUE, min_size=1, max_size=3, unique_by=lambda fv: fv[0]).map(dict))
def test_command_line_values_run_or_are_refused_in_one_line(kind, flags, tmp_path_factory, monkeypatch):
    """`delaylab run` with 1-3 settings drawn on top of a problem kind: it gets to the point of running
    (everything built: problem, schedule, algorithm) or exits 2 with one line on stderr, from the
    project's own checks. The run itself is replaced by the building (no compiling), so that each
    example takes milliseconds."""
    import contextlib
    import io

    from delaylab import cli, runs

    built = {}

    def build_only(cfg, folder, *, resume=False, quiet=False):
        built["parts"] = runs.prepare(cfg)
        return {"status": "complete", "final_loss": 0.0}

    monkeypatch.setattr(runs, "execute", build_only)
    out = str(tmp_path_factory.mktemp("run") / "r")
    argv = ["run", "--out", out, "--quiet", "--problem.kind", kind]
    for name, value in flags.items():
        argv.append(f"--{name}={value}")  # "=": a value may start with "-"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(argv)
    msg = err.getvalue()
    if rc == 0:
        assert "parts" in built and msg == ""
        return
    assert rc == 2, (argv, msg)
    assert msg.startswith("delaylab run: ") and msg.count("\n") == 1, (argv, msg)
    named = [n for f in flags for n in (f, f.split(".")[-1])] + ["problem.kind", "the configuration"]
    assert any(n in msg for n in named), (argv, msg)


@settings(max_examples=50, **SETTINGS)
@given(flag=st.sampled_from(FLAGS), value=VALUES)
def test_flag_values_are_accepted_or_refused_naming_the_flag(flag, value):
    try:
        C.from_flags({flag: value})
    except C.ConfigError as err:
        _one_line_naming(err, flag, flag.split(".")[-1])


FIELD_VALUES = st.one_of(st.integers(-3, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                         st.text(alphabet="abcxyz01 ,.-", max_size=5), st.lists(st.floats(-5, 20), max_size=5))
VALID = {"": {"stepsize": [0.01], "seeds": 2, "algorithm": "asgd", "log_every": 10, "x64": True, "seed": 3},
         "problem": {"dim": 5, "workers": 4, "noise": 0.1, "condition": 10.0, "kind": "quadratic"},
         "schedule": {"taus": [1.0, 2.0, 3.0, 4.0], "events": 200, "noise": "none", "policy": "async"}}
TOML_FIELDS = [(table, key) for table, fields in VALID.items() for key in fields] + [("", "bogus"),
                                                                                    ("problem", "nope")]


def _value(v) -> str:
    """One TOML value (TOML has nan and inf; strings here are plain ASCII)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _toml(doc: dict) -> str:
    """A TOML document: top-level keys (table ""), then one-level tables."""
    top = [f"{k} = {_value(v)}" for k, v in doc.get("", {}).items()]
    tables = [f"[{t}]\n" + "\n".join(f"{k} = {_value(v)}" for k, v in fields.items())
              for t, fields in doc.items() if t]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


def _valid(field):
    table, key = field
    return VALID.get(table, {}).get(key)


CHANGE = st.sampled_from(TOML_FIELDS).flatmap(
    lambda f: st.tuples(st.just(f), FIELD_VALUES if _valid(f) is None else st.one_of(st.just(_valid(f)), FIELD_VALUES)))


@settings(max_examples=150, **SETTINGS)
@given(changes=st.lists(CHANGE, min_size=1, max_size=3, unique_by=lambda c: c[0]).map(dict))
def test_toml_documents_are_accepted_or_refused_naming_the_field(changes, tmp_path_factory):
    """A valid document with 1-3 fields replaced by drawn values (or unknown fields added): read and
    built, or refused with one line naming a field that was changed."""
    from delaylab import runs

    doc = {t: dict(fields) for t, fields in VALID.items()}
    for (table, key), value in changes.items():
        doc[table][key] = value
    text = _toml(doc)
    tomllib.loads(text)  # the generator writes well-formed TOML (a parse error here is the test's bug)
    path = tmp_path_factory.mktemp("toml") / "run.toml"
    path.write_text(text)
    try:
        cfg = C.read_toml(str(path))
        if _small(cfg):
            runs.prepare(cfg)
    except (C.ConfigError, runs.RunError) as err:
        names = [k for _, k in changes] + ["configuration", "schedule.taus"]  # taus: checked against workers
        _one_line_naming(err, *names)


@settings(max_examples=30, **SETTINGS)
@given(head=st.binary(max_size=40), bad=st.sampled_from([b"\xff", b"\xe9", b"\xc3(", b"\x80", b"\xed\xa0\x80"]),
       tail=st.binary(max_size=40))
def test_a_config_file_that_is_not_utf8_is_refused_in_one_line(head, bad, tail, tmp_path_factory):
    """`delaylab run CONFIG` with bytes that are not UTF-8 (a Latin-1 file, say): exit 2 with one
    line naming the file and saying it must be UTF-8 TOML, not a UnicodeDecodeError traceback."""
    import contextlib
    import io

    from delaylab import cli

    data = head + bad + tail
    try:
        data.decode("utf-8")
        return  # the drawn bytes happen to decode (the invalid sequence completed by the tail)
    except UnicodeDecodeError:
        pass
    path = tmp_path_factory.mktemp("toml") / "latin1.toml"
    path.write_bytes(data)
    with pytest.raises(C.ConfigError) as caught:
        C.read_toml(str(path))
    _one_line_naming(caught.value, str(path))
    assert "must be UTF-8 TOML" in str(caught.value)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(["run", str(path), "--out", str(path.parent / "r"), "--quiet"])
    assert rc == 2 and err.getvalue().count("\n") == 1 and "must be UTF-8 TOML" in err.getvalue(), err.getvalue()


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-5, 50), st.booleans(),
                    st.none(), st.text(max_size=3))
TAUS = st.one_of(st.lists(st.one_of(st.floats(-2, 10), st.just(math.nan), st.just(math.inf)), max_size=5),
                 NUMBERS)


@settings(max_examples=200, **SETTINGS)
@given(which=st.sampled_from(["fixed_computation", "random_timing", "random_quadratic", "asgd", "rescaled_asgd"]),
       a=NUMBERS, taus=TAUS, n=st.one_of(st.integers(-2, 300), NUMBERS))
def test_public_constructors_accept_or_refuse_naming_the_argument(which, a, taus, n):
    try:
        if which == "fixed_computation":
            schedules.fixed_computation(taus, num_events=n)
        elif which == "random_timing":
            schedules.RandomTiming(taus, noise="exponential", scale=a)
        elif which == "random_quadratic":
            problems.random_quadratic(n, 3, condition=a)
        elif which == "asgd":
            algos.asgd(stepsize=a)
        else:
            algos.rescaled_asgd(stepsize=0.1, taus=taus)
    except (ValueError, TypeError) as err:
        names = {"fixed_computation": ("taus", "num_events"), "random_timing": ("taus", "scale"),
                 "random_quadratic": ("num_workers", "condition", "dim"), "asgd": ("stepsize",),
                 "rescaled_asgd": ("taus",)}[which]
        _one_line_naming(err, *names)


PLUGIN_BODIES = st.one_of(
    st.binary(max_size=40).map(lambda b: b),  # anything, including bytes that are not UTF-8
    st.sampled_from([b"", b"x = 1\n", b"def delaylab_algorithms(:\n", b"raise SystemExit(3)\n",
                     b"def delaylab_algorithms():\n    return None\n",
                     b"def delaylab_algorithms():\n    return ['asgd']\n",
                     b"from delaylab.registry import AlgorithmEntry\n"
                     b"def delaylab_algorithms():\n    return [AlgorithmEntry('p', 3, 'constant', '')]\n"]))


@settings(max_examples=60, **SETTINGS)
@given(kind=st.sampled_from(["file", "missing file", "module"]), body=PLUGIN_BODIES,
       name=st.text(alphabet="abcdefghij_0123456789.", min_size=1, max_size=8),
       command=st.sampled_from(["verify", "show", "run", "figure"]))
def test_plugin_values_are_refused_in_one_line_naming_the_plugin(kind, body, name, command, tmp_path_factory):
    """--plugin with a file of drawn content, a file that is not there, or a module that does not
    exist: every command refuses it before doing anything, in one line that names the plugin."""
    import contextlib
    import io

    from delaylab import cli, plugins, registry

    folder = tmp_path_factory.mktemp("plugin")
    if kind == "file":
        spec = str(folder / "plug.py")
        (folder / "plug.py").write_bytes(body)
    elif kind == "missing file":
        spec = str(folder / f"{name}.py")
    else:
        spec = f"zz_no_such_module_{name}".rstrip(".")
    args = {"verify": ["verify", "--no-out"], "show": ["show", str(folder)], "run": ["run", "--out", str(folder / "r")],
            "figure": ["figure", "r1", "--out", str(folder / "f")]}[command]
    before = dict(registry.ALGORITHMS)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli.main([*args, "--plugin", spec])
    assert rc == 2, (rc, err.getvalue())
    line = err.getvalue()
    assert line.count("\n") == 1 and spec in line and f"delaylab {command}: plugin" in line, line
    assert registry.ALGORITHMS == before and spec not in plugins.loaded()
