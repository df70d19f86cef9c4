"""Can XLA's own convolution replace the native (oneDNN, C++) one? The CNN's convolution routes
inside a ``lax.scan`` body, on CPU (results in RESULTS.md). XLA flags come from the environment
(``XLA_FLAGS``), so one process measures one flag set; the first route named is the reference
(default: "native", which needs ``make native``), timed interleaved rep by rep with the others so
that ratios within a process share the machine's load.

    XLA_FLAGS=... python -m benchmarks.conv_routes --workload sgd28 --batching map \
        --routes native,im2col,lax,lax_canon,lax_patches --reps 5 --steps 2

The workloads are :func:`build`'s (``maps28``, ``maps8``: :func:`build_map`'s) and the routes
:func:`module_for`'s; batching over the 8 workers is ``map`` (jax.lax.map) or ``vmap`` (jax.vmap).
``--compile-only``: compile seconds alone (:func:`main_compile`). Prints one JSON line per route
(:func:`main`) and appends it to ``--out``; CONVBENCH_HLO=DIR writes each route's optimized HLO there.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from delaylab import sim
from delaylab.sim import conv, models, native

WORKERS, BATCH, SHARD = 8, 64, 512


# --- convolution variants (patched into sim.conv.Conv2D's im2col slot) ------------------------

def conv_nchw(x, k):
    y = jax.lax.conv_general_dilated(jnp.transpose(x, (0, 3, 1, 2)), jnp.transpose(k, (3, 2, 0, 1)), (1, 1), "SAME",
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return jnp.transpose(y, (0, 2, 3, 1))


def conv_oihw(x, k):
    return jax.lax.conv_general_dilated(x, jnp.transpose(k, (3, 2, 0, 1)), (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "OIHW", "NHWC"))


def conv_patches(x, k):
    kh, kw, cin, cout = k.shape
    # patches: [N, H, W, C*kh*kw] with the feature dim ordered (c, kh, kw)
    p = jax.lax.conv_general_dilated_patches(x, (kh, kw), (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return p @ jnp.transpose(k, (2, 0, 1, 3)).reshape(cin * kh * kw, cout)


# lax_canon: the structure of sim.native (three bilinear primitives, each the others' transpose),
# but each lowered to XLA's own convolution in the canonical NHWC/HWIO form (operands transposed
# behind an optimization barrier, so that XLA cannot fold the transposes back into non-canonical
# dimension numbers). Pure JAX: no C++.
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir


def _pads(k):
    lo = (k - 1) // 2
    return lo, k - 1 - lo


def _canon_fwd(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _canon_bwd_data(g, w):
    kh, kw = w.shape[:2]
    (ah, bh), (aw, bw) = _pads(kh), _pads(kw)
    w2 = jax.lax.optimization_barrier(jnp.transpose(w[::-1, ::-1], (0, 1, 3, 2)))  # [KH, KW, O, C]
    return jax.lax.conv_general_dilated(g, w2, (1, 1), [(kh - 1 - ah, kh - 1 - bh), (kw - 1 - aw, kw - 1 - bw)],
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _canon_bwd_weights(x, g, *, kernel_size):
    kh, kw = kernel_size
    xt, gt = jax.lax.optimization_barrier((jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(g, (1, 2, 0, 3))))
    out = jax.lax.conv_general_dilated(xt, gt, (1, 1), [_pads(kh), _pads(kw)],
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))  # [C, KH, KW, O]
    return jnp.transpose(out, (1, 2, 0, 3))


cconv_p = Primitive("canon_conv")
cbd_p = Primitive("canon_conv_bwd_data")
cbw_p = Primitive("canon_conv_bwd_weights")
_aval = lambda shape, dt: jax.core.ShapedArray(tuple(shape), dt)
cconv_p.def_abstract_eval(lambda x, w: _aval(x.shape[:3] + (w.shape[3],), x.dtype))
cbd_p.def_abstract_eval(lambda g, w: _aval(g.shape[:3] + (w.shape[2],), g.dtype))
cbw_p.def_abstract_eval(lambda x, g, *, kernel_size: _aval(tuple(kernel_size) + (x.shape[3], g.shape[3]), x.dtype))
for _p, _f in ((cconv_p, _canon_fwd), (cbd_p, _canon_bwd_data), (cbw_p, _canon_bwd_weights)):
    _p.def_impl(lambda *a, _f=_f, **k: _f(*a, **k))
    mlir.register_lowering(_p, mlir.lower_fun(_f, multiple_results=False))
_ks = lambda w: tuple(w.aval.shape[:2])
ad.defbilinear(cconv_p, lambda ct, x, w: cbd_p.bind(ct, w),
               lambda ct, x, w: cbw_p.bind(x, ct, kernel_size=_ks(w)))
ad.defbilinear(cbd_p, lambda ct, g, w: cconv_p.bind(ct, w),
               lambda ct, g, w: cbw_p.bind(ct, g, kernel_size=_ks(w)))
ad.defbilinear(cbw_p, lambda ct, x, g, *, kernel_size: cbd_p.bind(g, ct),
               lambda ct, x, g, *, kernel_size: cconv_p.bind(x, ct))


for _p in (cconv_p, cbd_p, cbw_p):
    batching.primitive_batchers[_p] = functools.partial(native._batch, _p, weights_p=cbw_p)  # sim.native's rule


def conv_canon(x, k):
    return cconv_p.bind(x, k)


VARIANTS = {"lax_nchw": conv_nchw, "lax_oihw": conv_oihw, "lax_patches": conv_patches, "lax_canon": conv_canon}
_orig_im2col = conv.conv2d_im2col
_current = {"fn": _orig_im2col}
conv.conv2d_im2col = lambda x, k: _current["fn"](x, k)


def module_for(route):
    """The CNN whose Conv2D computes by ``route``:

      native        sim.native (oneDNN through jax.ffi)           [sim.models.CNN(conv_impl="native")]
      im2col        sim.conv.conv2d_im2col                       [conv_impl="im2col"]
      lax           lax.conv_general_dilated NHWC/HWIO (the project's "lax")  [conv_impl="lax"]
      lax_nchw      x→NCHW, kernel→OIHW, conv_general_dilated NCHW/OIHW/NCHW, back to NHWC
                    (also what jax.lax.conv computes: its dimension numbers are NCHW/OIHW)
      lax_oihw      NHWC activations with the kernel transposed to OIHW
      lax_patches   jax.lax.conv_general_dilated_patches (XLA builds the patches) + one dot
      lax_canon     sim.native's three bilinear primitives, lowered to XLA convolutions in canonical
                    NHWC/HWIO form (transposes behind optimization barriers); pure JAX
    """
    if route in ("native", "im2col", "lax"):
        _current["fn"] = _orig_im2col
        return models.CNN(classes=10, channels=(32, 64), hidden=128, conv_impl=route)
    _current["fn"] = VARIANTS[route]
    return models.CNN(classes=10, channels=(32, 64), hidden=128, conv_impl="im2col")


# --- the scanned program -----------------------------------------------------------------------

def build(route, workload, batching, steps, size):
    """The jitted program of one route and workload: a ``lax.scan`` of ``steps`` steps, so per
    worker-step time = call time / (steps × 8); ``steps=0``: one step jitted without the scan (for
    comparison). Each step is one for each of 8 virtual workers, each with its own parameters and
    its own 512-example shard of random data, a fresh batch of 64 drawn inside every step as
    ``sim.problems.worker_batch`` does; the workers are batched by ``batching``. Workloads:

      sgd28  one SGD step (value_and_grad of softmax cross-entropy + update), 28×28×1 inputs
      sgd8   the same on 8×8×1 inputs (scikit-learn digits size)
      hvp28  AdaHessian's forward-over-reverse pass jax.jvp(value_and_grad(loss), (θ,), (z,)) with a
             Rademacher z, and an update from grad and z⊙Hz, 28×28×1 inputs
    """
    module = module_for(route)
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(WORKERS, SHARD, size, size)).astype(np.float32))
    y = jnp.asarray(rng.integers(0, 10, size=(WORKERS, SHARD)).astype(np.int32))
    p0 = module.init(jax.random.key(0), jnp.zeros((1, size, size), jnp.float32))["params"]
    params = jax.tree.map(lambda p: jnp.broadcast_to(p, (WORKERS,) + p.shape) + 0.0, p0)
    lr = 0.01

    def loss(p, Xb, yb):
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(module.apply({"params": p}, Xb), yb))

    def worker_step(p, w, key):
        kb, kz = jax.random.split(key)
        idx = (jax.random.bits(kb, (BATCH,), jnp.uint32) % jnp.uint32(SHARD)).astype(jnp.int32)
        Xb, yb = X[w, idx], y[w, idx]
        vg = jax.value_and_grad(lambda q: loss(q, Xb, yb))
        if workload == "hvp28":
            leaves, tdef = jax.tree.flatten(p)
            ks = jax.random.split(kz, len(leaves))
            z = tdef.unflatten([jax.random.rademacher(k, l.shape, l.dtype) for k, l in zip(ks, leaves)])
            (val, g), (_, hz) = jax.jvp(vg, (p,), (z,))
            newp = jax.tree.map(lambda a, b, zz, h: a - lr * (b + 1e-3 * jnp.abs(zz * h)), p, g, z, hz)
        else:
            val, g = vg(p)
            newp = jax.tree.map(lambda a, b: a - lr * b, p, g)
        return newp, val

    ws = jnp.arange(WORKERS)

    def body(carry, _):
        ps, key = carry
        key, sub = jax.random.split(key)
        keys = jax.random.split(sub, WORKERS)
        if batching == "map":
            ps, vals = jax.lax.map(lambda a: worker_step(*a), (ps, ws, keys))
        else:
            ps, vals = jax.vmap(worker_step)(ps, ws, keys)
        return (ps, key), jnp.mean(vals)

    @jax.jit
    def run(ps, key):
        if steps == 0:  # no scan: one step, jitted on its own
            (ps, _), vals = body((ps, key), None)
            return ps, vals
        (ps, _), vals = jax.lax.scan(body, (ps, key), None, length=steps)
        return ps, vals

    if os.environ.get("CONVBENCH_HLO"):  # write the optimized HLO of this route's program
        with open(os.path.join(os.environ["CONVBENCH_HLO"], f"{route}_{workload}_{batching}_{steps}.txt"), "w") as fh:
            fh.write(run.lower(params, jax.random.key(1)).compile().as_text())

    call = lambda: run(params, jax.random.key(1))
    call.lower = lambda: run.lower(params, jax.random.key(1))
    return call


def main_compile(a, size):
    """Trace+lower and XLA compile seconds per route (no run), min over --reps fresh builds."""
    for r in a.routes.split(","):
        low, comp = [], []
        for _ in range(a.reps):
            f = build(r, a.workload, a.batching, a.steps, size)
            t = time.perf_counter()
            lowered = f.lower()
            t1 = time.perf_counter()
            lowered.compile()
            t2 = time.perf_counter()
            low.append(t1 - t)
            comp.append(t2 - t1)
        rec = {"tag": a.tag, "xla_flags": os.environ.get("XLA_FLAGS", ""), "workload": a.workload,
               "batching": a.batching, "route": r, "steps": a.steps, "mode": "compile-only",
               "lower_s_min": min(low), "compile_s_min": min(comp), "compile_s_all": [round(c, 2) for c in comp]}
        print(json.dumps(rec), flush=True)
        with open(a.out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


# --- the convolution maps one by one (forward, input gradient, kernel gradient of each layer) ---

def map_fns(route):
    if route == "native":
        return (native.conv_p.bind, native.conv_bwd_data_p.bind,
                lambda x, g, kernel_size: native.conv_bwd_weights_p.bind(x, g, kernel_size=kernel_size))
    if route == "lax_canon":
        return (cconv_p.bind, cbd_p.bind, lambda x, g, kernel_size: cbw_p.bind(x, g, kernel_size=kernel_size))
    if route == "lax":  # what jax.grad makes of lax.conv_general_dilated (its transposes)
        return native._ref_conv, native._ref_bwd_data, native._ref_bwd_weights
    if route == "im2col":
        def bd(g, w):
            return jax.linear_transpose(lambda x: _orig_im2col(x, w),
                                        jax.ShapeDtypeStruct(g.shape[:3] + (w.shape[2],), g.dtype))(g)[0]

        def bw(x, g, kernel_size):
            return jax.linear_transpose(lambda w: _orig_im2col(x, w),
                                        jax.ShapeDtypeStruct(tuple(kernel_size) + (x.shape[3], g.shape[3]),
                                                             x.dtype))(g)[0]
        return _orig_im2col, bd, bw
    raise ValueError(route)


def build_map(route, which, size, steps):
    """One of the maps of one layer, for 8 workers (lax.map, each its own operands), in a scan: the
    workloads maps28 and maps8 time each convolution map of each layer alone (forward, input
    gradient, kernel gradient), on the routes native, lax_canon, lax and im2col."""
    fwd, bd, bw = map_fns(route)
    layer, kind = which.split(".")
    h, c, o = (size, 1, 32) if layer == "L0" else (size // 2, 32, 64)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(WORKERS, BATCH, h, h, c)).astype(np.float32))
    w = jnp.asarray(rng.normal(size=(WORKERS, 5, 5, c, o)).astype(np.float32))
    g = jnp.asarray(rng.normal(size=(WORKERS, BATCH, h, h, o)).astype(np.float32))
    if kind == "fwd":
        ops, f = (x, w), fwd
    elif kind == "bwd_data":
        ops, f = (g, w), bd
    else:
        ops, f = (x, g), lambda a, b: bw(a, b, kernel_size=(5, 5))

    def body(s, _):
        ys = jax.lax.map(lambda ab: f(ab[0] + s, ab[1]), ops)
        return s + 1e-30 * jnp.sum(ys), None

    run = jax.jit(lambda: jax.lax.scan(body, jnp.float32(0), None, length=steps)[0])
    return run


def main_maps(a, size):
    whichs = ["L0.fwd", "L0.bwd_weights", "L1.fwd", "L1.bwd_data", "L1.bwd_weights"]
    routes = a.routes.split(",")
    for wh in whichs:
        fns = {}
        for r in routes:
            f = build_map(r, wh, size, a.steps)
            t = time.perf_counter()
            jax.block_until_ready(f())
            fns[r] = (f, time.perf_counter() - t, [])
        for _ in range(a.reps):
            for r in routes:
                t = time.perf_counter()
                jax.block_until_ready(fns[r][0]())
                fns[r][2].append(time.perf_counter() - t)
        per = WORKERS * a.steps
        for r in routes:
            ts = np.array(fns[r][2])
            rec = {"tag": a.tag, "xla_flags": os.environ.get("XLA_FLAGS", ""), "workload": a.workload, "map": wh,
                   "route": r, "steps": a.steps, "reps": len(ts), "ms_median": float(np.median(ts)) / per * 1e3,
                   "ms_min": float(ts.min()) / per * 1e3, "compile_s": fns[r][1] - float(np.median(ts))}
            print(json.dumps(rec), flush=True)
            with open(a.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


def main():
    """Prints one JSON line per route (ms per worker-step: median, min, all reps; compile seconds =
    first call − median later call) and appends it to ``--out``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=("sgd28", "sgd8", "hvp28", "maps28", "maps8"), default="sgd28")
    ap.add_argument("--batching", choices=("map", "vmap"), default="map")
    ap.add_argument("--routes", default="native,im2col,lax")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--tag", default=os.environ.get("XLA_FLAGS", "") or "default")
    ap.add_argument("--out", default="benchmarks/conv_routes.jsonl", help="JSON lines are appended here")
    ap.add_argument("--max-call-s", type=float, default=60.0,
                    help="a route whose first later call takes longer than this is timed fewer times (reps 2)")
    ap.add_argument("--compile-only", action="store_true",
                    help="only trace+lower and compile each route (--reps times), report seconds")
    a = ap.parse_args()
    size = 8 if a.workload in ("sgd8", "maps8") else 28
    if a.workload.startswith("maps"):
        return main_maps(a, size)
    if a.compile_only:
        return main_compile(a, size)
    routes = a.routes.split(",")
    print(f"sim from {sim.__file__}; native {native.status()}; jax {jax.__version__}; "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; {a.workload} {a.batching} steps={a.steps}", flush=True)
    fns, info = {}, {}
    for r in routes:
        f = build(r, a.workload, a.batching, a.steps, size)
        t = time.perf_counter()
        jax.block_until_ready(f())
        first = time.perf_counter() - t
        t = time.perf_counter()
        jax.block_until_ready(f())
        second = time.perf_counter() - t
        fns[r], info[r] = f, {"first_s": first, "times": [second]}
        print(f"  {r:12s} first call {first:7.1f} s, second {second * 1e3:9.1f} ms", flush=True)
    for rep in range(a.reps - 1):  # interleaved: every route once per round
        for r in routes:
            if rep >= 1 and info[r]["times"][0] > a.max_call_s:
                continue
            t = time.perf_counter()
            jax.block_until_ready(fns[r]())
            info[r]["times"].append(time.perf_counter() - t)
    per = WORKERS * max(a.steps, 1)
    ref = routes[0]
    ref_med = float(np.median(info[ref]["times"]))
    for r in routes:
        ts = np.array(info[r]["times"])
        med = float(np.median(ts))
        rec = {"tag": a.tag, "xla_flags": os.environ.get("XLA_FLAGS", ""), "workload": a.workload,
               "batching": a.batching, "route": r, "steps": a.steps, "reps": len(ts),
               "ms_median": med / per * 1e3, "ms_min": float(ts.min()) / per * 1e3,
               "ms_all": [round(float(t) / per * 1e3, 2) for t in ts],
               "compile_s": info[r]["first_s"] - med, "ratio_to_" + ref: med / ref_med}
        print(json.dumps(rec), flush=True)
        with open(a.out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
