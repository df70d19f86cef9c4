"""Generated bad input (issue 25, part 4): command-line values, TOML documents and the public
constructors' arguments drawn by hypothesis; each must be accepted, or refused with the project's
own error (ValueError, of which ConfigError is one, or TypeError for a wrong type) in one line that
names the argument: never a traceback from inside jax, numpy or matplotlib. The examples are kept
small (no schedule of more than 10^5 events is built) so that each property runs in seconds; the
number of examples per property is its ``max_examples``."""

import math
import tomllib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import algos
from delaylab import config as C
from sim import problems, schedules

# derandomized (the same examples on every run, as the suite's numbers are) and no example database
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None)

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


@settings(max_examples=150, **SETTINGS)
@given(flag=st.sampled_from(FLAGS), value=st.one_of(WORDS, st.text(max_size=6)))
def test_flag_values_are_accepted_or_refused_naming_the_flag(flag, value):
    try:
        cfg = C.from_flags({flag: value})
    except C.ConfigError as err:
        _one_line_naming(err, flag, flag.split(".")[-1])
        return
    if not _small(cfg):
        return
    try:  # building is what runs before compiling: it must refuse what the run would choke on
        schedule = C.build_schedule(cfg)
        C.build_algorithm(cfg, schedule)
        C.build_problem(cfg)
    except (C.ConfigError, ValueError, TypeError) as err:
        _one_line_naming(err, flag, flag.split(".")[-1])


SCALARS = st.one_of(st.integers(-3, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.text(alphabet="abcxyz01 ,.-", max_size=5), st.lists(st.floats(-5, 20), max_size=5))


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
    """A TOML document of top-level keys, then one-level tables."""
    top = [f"{k} = {_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    tables = [f"[{k}]\n" + "\n".join(f"{kk} = {_value(vv)}" for kk, vv in v.items())
              for k, v in doc.items() if isinstance(v, dict)]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


@settings(max_examples=150, **SETTINGS)
@given(doc=st.dictionaries(st.sampled_from(["stepsize", "seeds", "algorithm", "events", "problem", "schedule",
                                            "log_every", "bogus", "x64", "seed"]),
                           st.one_of(SCALARS, st.dictionaries(st.sampled_from(["dim", "workers", "taus", "noise",
                                                                              "kind", "events", "nope"]),
                                                              SCALARS, max_size=3)),
                           max_size=4))
def test_toml_documents_are_accepted_or_refused_in_one_line(doc, tmp_path_factory):
    path = tmp_path_factory.mktemp("toml") / "run.toml"
    text = _toml(doc)
    tomllib.loads(text)  # the generator writes well-formed TOML (a parse error here is the test's bug)
    path.write_text(text)
    try:
        cfg = C.read_toml(str(path))
    except C.ConfigError as err:
        msg = str(err)
        assert msg and len(msg.strip().splitlines()) <= 1, msg
        return
    if _small(cfg):
        try:
            schedule = C.build_schedule(cfg)
            C.build_algorithm(cfg, schedule)
            C.build_problem(cfg)
        except (ValueError, TypeError) as err:
            assert len(str(err).strip().splitlines()) <= 1, str(err)


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
