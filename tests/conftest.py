"""Suite-wide settings: float64 (tests compare against references to 1e-10) and strict
promotion rules, so that an accidental dtype or rank promotion fails loudly."""

import os

# Tests compile hundreds of small programs and run each briefly, so compiling dominates the suite.
# Two XLA settings make compiling cheaper than they make running dearer here, both measured on the
# whole suite on 2 cores (2026-12-05): LLVM's backend optimisation passes off (level 0 instead of
# XLA's default 2: 641 s against 767 s) and XLA's CPU fusion emitters off (the older elemental
# emitters: 482 s against 588 s; a small MLP program's compile 1.2 s instead of 3.4 s). Every test
# passes with and without them; one compared two different programs bit for bit and now allows
# rounding (tests/algos/test_elastic.py). Set before jax is imported (XLA reads XLA_FLAGS once);
# subprocesses inherit them, except the CLI's long runs (tests/delaylab/test_run_cli.py) and the
# notebooks, which run at XLA's defaults like a user's. Figures, benchmarks and users' runs keep
# the defaults.
SUITE_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + SUITE_XLA_FLAGS).strip()

# Every test that reads "the installed data" reads scikit-learn's bundled digits: the suite's runs
# are then the same on a machine with only Python as where Debian's Fashion-MNIST is installed (and
# as cheap: the 28×28 images cost the tests that train on them about twice the time). Tests of the
# data loader give their locations explicitly. Subprocesses inherit it.
os.environ["DELAYLAB_DATA"] = "digits"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_collection_modifyitems(config, items):
    """Modules marked ``slow`` (they hold tests of 10 s or more) run first, whole modules kept
    together (their module-scoped fixtures are set up once). Why: pytest-xdist's worksteal hands
    each worker a contiguous share of this order and steals from the ends of the queues, so a long
    test left at the end keeps one core busy while the other idles. ``-m "not slow"`` gives a
    quick run of the rest."""
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow)  # stable: the order within stays


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After a test module, drop every compiled program if the process holds many. Why: XLA's CPU
    backend maps each compiled object into memory (three mappings: code, constants, data) for as long as a cache
    holds its program, and the engine's one jitted entry point caches every program it compiles.
    Past Linux's limit of 65,530 mappings per process (vm.max_map_count) LLVM's allocation fails
    ("LLVM compilation error: Cannot allocate memory") and XLA's compiler segfaults: the crash that
    once made the Makefile split the suite. Measured 2026-12-05: the whole suite in one process
    without this fixture peaked at 54,900 mappings (it has since had fewer programs to compile than
    when it crashed); a loop compiling 40-kernel programs held in one jit's cache segfaulted at
    about 64,000 mappings, 505 programs in. tests/test_memory_maps.py checks that
    `jax.clear_caches()` gives the mappings back. Cleared only past 30,000, about half the limit."""
    yield
    # Only when the process holds many: programs shared across modules (same shapes) stay compiled.
    if memory_mappings() > 30_000:
        jax.clear_caches()


def memory_mappings() -> int:
    """The memory mappings this process holds (0 where there is no /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as fh:
            return sum(1 for _ in fh)
    except OSError:  # not Linux: no such limit to watch
        return 0


@pytest.fixture
def getkey():
    """A fresh PRNG key per call, from a fixed seed: tests stay deterministic."""
    base = [jax.random.key(1234)]

    def next_key():
        base[0], sub = jax.random.split(base[0])
        return sub

    return next_key


def rel_err(a, b) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


FASHION_MNIST = "/usr/share/datasets/fashion-mnist"

# Tests that need Debian's Fashion-MNIST skip without it, saying so; where .ci/run installed it,
# DELAYLAB_REQUIRE_DATA=1 makes them run (and fail if it is missing after all).
needs_fashion_mnist = pytest.mark.skipif(
    not os.path.isdir(FASHION_MNIST) and os.environ.get("DELAYLAB_REQUIRE_DATA") != "1",
    reason=f"Debian's Fashion-MNIST is not installed ({FASHION_MNIST}; apt-get install dataset-fashion-mnist, "
           "or `make data`)")
