"""A native stride-1 "SAME" 2-D convolution for float32 on CPU: oneDNN's kernels called from XLA
through ``jax.ffi`` (``conv_dnnl.cc``, built by ``make native`` into ``libdelaylab_conv.so``).

On this project's 2-core CPU, XLA's own convolution is slow inside the engine's loops and the
im2col route spends most of the CNN's step building patches and in three large matmuls; oneDNN's
direct convolution does the 14×14, 32 → 64 layer's forward, input gradient and kernel gradient in
about a third of that time. No XLA CPU option in jaxlib 0.10.2 (YNNPACK convolutions on or off,
oneDNN or XNNPACK fusions, which take no convolutions) nor any layout brings XLA's convolution
within 13x of these kernels per SGD step; the best pure-JAX arrangement takes 1.26–5.6x their time
(``python -m benchmarks.conv_routes``, benchmarks/RESULTS.md). So it stays, opt-in.

Three JAX primitives, ``conv``, ``conv_bwd_data`` and ``conv_bwd_weights``, each bilinear in its
two operands and each one's transposes the other two (the ``ad.defbilinear`` rules below), so
reverse mode, forward mode and their compositions (AdaHessian's forward-over-reverse
Hessian-vector products) all reduce to these three kernels. Fallbacks: :func:`conv2d_same`.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import dispatch
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

LIBRARY = Path(__file__).with_name("libdelaylab_conv.so")
_TARGETS = {"conv": "DelaylabConv", "conv_bwd_data": "DelaylabConvBackwardData",
            "conv_bwd_weights": "DelaylabConvBackwardWeights"}


@functools.cache
def _load() -> tuple[bool, str]:
    if os.environ.get("DELAYLAB_NATIVE_CONV", "1") == "0":
        return False, "disabled by DELAYLAB_NATIVE_CONV=0"
    if not LIBRARY.exists():
        return False, f"{LIBRARY.name} is not built (run `make native`: it builds with g++ and Debian's libdnnl-dev, or from PyPI's oneDNN and Zig's compiler)"
    try:
        lib = ctypes.cdll.LoadLibrary(str(LIBRARY))
    except OSError as e:
        return False, f"{LIBRARY.name} does not load: {e}"
    for name, symbol in _TARGETS.items():
        jax.ffi.register_ffi_target(f"delaylab_{name}", jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    return True, "oneDNN"


def available() -> bool:
    """Whether the native convolution is built and loads (see :func:`status` for why not)."""
    return _load()[0]


def status() -> str:
    """"oneDNN" where the native convolution is in use, else the reason it is not."""
    return _load()[1]


CONV_IMPLS = ("auto", "native", "im2col", "lax")  # the routes of sim.conv.Conv2D


def conv_impl_for(impl: str, dtype) -> str:
    """What :class:`sim.conv.Conv2D` with ``impl`` computes by in ``dtype`` on the default
    backend: "im2col", "native" or "lax". "native" is taken for float32 on CPU where the library
    is built (else im2col); "auto" is "native" where that holds, im2col elsewhere on CPU, XLA's
    own convolution on other backends."""
    if impl not in CONV_IMPLS:
        raise ValueError(f"conv impl must be one of {CONV_IMPLS}; got {impl!r}")
    native_ok = jnp.dtype(dtype) == jnp.float32 and jax.default_backend() == "cpu" and available()
    if impl == "native":
        return "native" if native_ok else "im2col"
    if impl == "auto":
        if jax.default_backend() != "cpu":
            return "lax"
        return "native" if native_ok else "im2col"
    return impl


def convolution_in_use() -> str:
    """What a CNN's float32 convolutions compute by in this process ("auto"), with the reason
    where the native one is not used: recorded in every run folder's environment."""
    used = conv_impl_for("auto", jnp.float32)
    return {"native": "native (oneDNN)", "im2col": f"im2col ({status()})"}.get(used, used)


# --- XLA reference (other backends and the tests): the same maps by lax's convolution ----------

_DN = ("NHWC", "HWIO", "NHWC")


def _ref_conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_DN)


def _ref_bwd_data(g, w):
    x = jax.ShapeDtypeStruct(g.shape[:3] + (w.shape[2],), g.dtype)
    return jax.linear_transpose(lambda x: _ref_conv(x, w), x)(g)[0]


def _ref_bwd_weights(x, g, *, kernel_size):
    w = jax.ShapeDtypeStruct(tuple(kernel_size) + (x.shape[3], g.shape[3]), x.dtype)
    return jax.linear_transpose(lambda w: _ref_conv(x, w), w)(g)[0]


# --- the primitives ---------------------------------------------------------------------------

conv_p = Primitive("delaylab_conv")
conv_bwd_data_p = Primitive("delaylab_conv_bwd_data")
conv_bwd_weights_p = Primitive("delaylab_conv_bwd_weights")


def _aval(shape, dtype):
    return jax.core.ShapedArray(tuple(shape), dtype)


conv_p.def_abstract_eval(lambda x, w: _aval(x.shape[:3] + (w.shape[3],), x.dtype))
conv_bwd_data_p.def_abstract_eval(lambda g, w: _aval(g.shape[:3] + (w.shape[2],), g.dtype))
conv_bwd_weights_p.def_abstract_eval(
    lambda x, g, *, kernel_size: _aval(tuple(kernel_size) + (x.shape[3], g.shape[3]), x.dtype))

_REFS = {conv_p: _ref_conv, conv_bwd_data_p: _ref_bwd_data, conv_bwd_weights_p: _ref_bwd_weights}
for _p, _ref in _REFS.items():
    _p.def_impl(functools.partial(dispatch.apply_primitive, _p))
    mlir.register_lowering(_p, mlir.lower_fun(_ref, multiple_results=False))
    _native = jax.ffi.ffi_lowering(_p.name)

    def _cpu_lowering(ctx, *args, _native=_native, _ref=_ref, **params):
        if all(a.dtype == np.float32 for a in ctx.avals_in) and available():
            return _native(ctx, *args)  # the kernel size is the result's shape; no attributes
        return mlir.lower_fun(_ref, multiple_results=False)(ctx, *args, **params)

    mlir.register_lowering(_p, _cpu_lowering, platform="cpu")


def _ksize(w):
    return tuple(w.aval.shape[:2])


# The three maps, each bilinear in its two operands:
# - conv: y = x ⋆ w, with x [N, H, W, C] and w [KH, KW, C, O] (HWIO) → y [N, H, W, O];
# - conv_bwd_data: (g, w) ↦ the transpose of x ↦ x ⋆ w applied to g → [N, H, W, C];
# - conv_bwd_weights: (x, g) ↦ the transpose of w ↦ x ⋆ w applied to g → [KH, KW, C, O].
# Each one's transposes are the other two, and a bilinear map's JVP is the sum of the map on one
# tangent and the other, so every mode of differentiation reduces to these three kernels.
# Transposes (bilinear: the cotangent goes to whichever operand is the linear input).
ad.defbilinear(conv_p,
               lambda ct, x, w: conv_bwd_data_p.bind(ct, w),
               lambda ct, x, w: conv_bwd_weights_p.bind(x, ct, kernel_size=_ksize(w)))
ad.defbilinear(conv_bwd_data_p,
               lambda ct, g, w: conv_p.bind(ct, w),
               lambda ct, g, w: conv_bwd_weights_p.bind(ct, g, kernel_size=_ksize(w)))
ad.defbilinear(conv_bwd_weights_p,
               lambda ct, x, g, *, kernel_size: conv_bwd_data_p.bind(g, ct),
               lambda ct, x, g, *, kernel_size: conv_p.bind(x, ct))


def _batch(prim, args, dims, *, weights_p=None, **params):
    """vmap of one of the three maps: a batch is folded into N where the kernel is shared, and
    mapped over otherwise. ``weights_p``: the kernel-gradient primitive of the family
    (``conv_bwd_weights_p`` by default; benchmarks/conv_routes.py passes its own)."""
    a, b = args
    da, db = dims
    if db is None and prim is not (weights_p or conv_bwd_weights_p):
        # Shared kernel: the batch joins the images' axis.
        a = jnp.moveaxis(a, da, 0)
        B, N = a.shape[:2]
        out = prim.bind(a.reshape((B * N,) + a.shape[2:]), b, **params)
        return out.reshape((B, N) + out.shape[1:]), 0
    size = a.shape[da] if da is not None else b.shape[db]
    a, b = (jnp.broadcast_to(v, (size,) + v.shape) if d is None else jnp.moveaxis(v, d, 0)
            for v, d in ((a, da), (b, db)))
    return jax.lax.map(lambda ab: prim.bind(*ab, **params), (a, b)), 0


for _p in _REFS:
    batching.primitive_batchers[_p] = functools.partial(_batch, _p)


def conv2d_same(x, kernel):
    """x ⋆ kernel for x [N, H, W, C] and an HWIO kernel [KH, KW, C, O], stride 1, "SAME"
    (zero padding (K − 1) // 2 before, the rest after: lax's "SAME"), by oneDNN on CPU.

    Where the library is not built (or ``DELAYLAB_NATIVE_CONV=0``), for other dtypes and on other
    backends, this is not used: :class:`sim.conv.Conv2D` falls back to im2col, and the primitives
    themselves lower to XLA's convolution off CPU."""
    x, kernel = jnp.asarray(x), jnp.asarray(kernel)
    if x.ndim != 4 or kernel.ndim != 4 or x.shape[3] != kernel.shape[2]:
        raise ValueError(f"conv2d_same takes x [N, H, W, C] and a kernel [KH, KW, C, O]; got {x.shape} and "
                         f"{kernel.shape}")
    if x.dtype != kernel.dtype:
        raise ValueError(f"x and kernel must have one dtype; got {x.dtype} and {kernel.dtype}")
    return conv_p.bind(x, kernel)
