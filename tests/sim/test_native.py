"""The native (oneDNN) convolution of sim.native against XLA's convolution.

Two kinds of test. The differentiation rules (transposes, JVPs, batching) are checked whether
or not the library is built: without it the primitives lower to XLA's convolution, so the tests
check the rules alone. The kernels themselves are checked where the library loads; .ci/run sets
DELAYLAB_REQUIRE_NATIVE=1 where it could install oneDNN, and then a missing library fails."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from delaylab.sim import models, native

needs_lib = pytest.mark.skipif(not native.available() and os.environ.get("DELAYLAB_REQUIRE_NATIVE") != "1",
                               reason=f"native convolution unavailable: {native.status()}")

# (x shape, kernel shape): the CNN's two layers at a small batch, a non-square image, even and
# 3×3 kernels (asymmetric "SAME" padding), one input channel.
SHAPES = [((3, 14, 14, 32), (5, 5, 32, 64)), ((2, 9, 7, 3), (4, 4, 3, 5)), ((2, 28, 28, 1), (5, 5, 1, 8)),
          ((1, 6, 11, 4), (3, 3, 4, 2))]


def _rand(key, shape, dtype):
    return jax.random.normal(key, shape, dtype)


def _close(got, want, tol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = np.max(np.abs(want))
    assert np.max(np.abs(got - want)) <= tol * scale, (np.max(np.abs(got - want)), tol * scale)


def _numpy_conv(x, w):
    """Stride-1 "SAME" convolution by plain NumPy in float64, offset by offset (lax's padding:
    (K − 1) // 2 before, the rest after): the reference that shares no code with JAX or oneDNN."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    kh, kw = w.shape[:2]
    H, W = x.shape[1:3]
    xp = np.pad(x, ((0, 0), ((kh - 1) // 2, kh - 1 - (kh - 1) // 2), ((kw - 1) // 2, kw - 1 - (kw - 1) // 2), (0, 0)))
    out = np.zeros(x.shape[:3] + (w.shape[3],))
    for i in range(kh):
        for j in range(kw):
            out += xp[:, i:i + H, j:j + W, :] @ w[i, j]
    return out


def _loss(conv):
    return lambda x, w: jnp.sum(jnp.sin(conv(x, w)))


@pytest.mark.parametrize("dtype,tol,shapes", [(jnp.float32, 2e-5, SHAPES[:2]), (jnp.float64, 1e-12, SHAPES[2:])])
def test_rules_forward_grad_hvp_and_vmap_match_lax(dtype, tol, shapes):
    """Forward, gradient, forward-over-reverse (AdaHessian's H z) and vmap of the primitives,
    against the same maps by lax.conv_general_dilated. float64 always lowers to XLA (rules
    alone); float32 runs oneDNN where it is built. (Half the shapes each, to save compiles.)"""
    for xs, ws in shapes:
        k = jax.random.split(jax.random.key(sum(xs) + sum(ws)), 6)
        x, w, dx, dw = (_rand(k[i], s, dtype) for i, s in enumerate((xs, ws, xs, ws)))
        ours, ref = _loss(native.conv2d_same), _loss(native._ref_conv)
        _close(jax.jit(native.conv2d_same)(x, w), _numpy_conv(x, w), tol)  # the forward map, independently
        # the differentiation rules (transposes, JVPs, batching) against JAX's own for lax's convolution
        for a, b in zip(jax.jit(jax.grad(ours, (0, 1)))(x, w), jax.grad(ref, (0, 1))(x, w)):
            _close(a, b, tol)
        hvp = lambda f: jax.jvp(jax.grad(f, (0, 1)), (x, w), (dx, dw))[1]
        for a, b in zip(jax.jit(lambda: hvp(ours))(), hvp(ref)):
            _close(a, b, tol)
        xb, wb = _rand(k[4], (3,) + xs, dtype), _rand(k[5], (3,) + ws, dtype)
        for axes, args in (((0, None), (xb, w)), ((0, 0), (xb, wb)), ((None, 0), (x, wb))):
            got = jax.jit(jax.vmap(jax.grad(ours, (0, 1)), axes))(*args)
            for a, b in zip(got, jax.vmap(jax.grad(ref, (0, 1)), axes)(*args)):
                _close(a, b, tol)


def test_the_three_maps_are_each_others_transposes():
    """<x ⋆ w, g> = <x, bwd_data(g, w)> = <w, bwd_weights(x, g)>, with each map computed
    directly (float64, lowered to XLA; the kernels' values are checked above)."""
    k = jax.random.split(jax.random.key(1), 3)
    x, w, g = (_rand(k[i], s, jnp.float64) for i, s in enumerate(((2, 9, 7, 3), (4, 4, 3, 5), (2, 9, 7, 5))))
    y = native.conv_p.bind(x, w)
    gx = native.conv_bwd_data_p.bind(g, w)
    gw = native.conv_bwd_weights_p.bind(x, g, kernel_size=(4, 4))
    assert gx.shape == x.shape and gw.shape == w.shape
    inner = float(jnp.vdot(y, g))
    np.testing.assert_allclose(float(jnp.vdot(x, gx)), inner, rtol=1e-12)
    np.testing.assert_allclose(float(jnp.vdot(w, gw)), inner, rtol=1e-12)


@needs_lib
def test_kernels_match_lax_and_repeat_bit_for_bit():
    assert native.available(), native.status()
    for xs, ws in SHAPES:
        k = jax.random.split(jax.random.key(7), 3)
        x, w, g = _rand(k[0], xs, jnp.float32), _rand(k[1], ws, jnp.float32), _rand(k[2], xs[:3] + ws[3:], jnp.float32)
        f = jax.jit(lambda x, w, g: (native.conv_p.bind(x, w), native.conv_bwd_data_p.bind(g, w),
                                     native.conv_bwd_weights_p.bind(x, g, kernel_size=ws[:2])))
        hlo = f.lower(x, w, g).as_text()
        assert "delaylab_conv_bwd_weights" in hlo and "custom_call" in hlo  # the kernels, not the fallback
        got = f(x, w, g)
        want = (native._ref_conv(x, w), native._ref_bwd_data(g, w), native._ref_bwd_weights(x, g, kernel_size=ws[:2]))
        for a, b in zip(got, want):
            _close(a, b, 2e-5)
        _close(got[0], _numpy_conv(x, w), 2e-5)
        for a, b in zip(got, f(x, w, g)):
            np.testing.assert_array_equal(a, b)


@needs_lib
def test_cnn_native_matches_im2col_and_adahessian_probe():
    """The whole CNN (float32, 28×28): loss, gradient and a Hutchinson H z by the native
    convolution against the same network by im2col."""
    k = jax.random.split(jax.random.key(3), 3)
    X = _rand(k[0], (16, 28, 28), jnp.float32)
    y = jax.random.randint(k[1], (16,), 0, 10)
    nets = {impl: models.CNN(classes=10, conv_impl=impl) for impl in ("native", "im2col")}
    p = jax.tree.map(lambda a: a.astype(jnp.float32), nets["im2col"].init(jax.random.key(0), X)["params"])
    z = jax.tree.map(lambda a: jax.random.rademacher(k[2], a.shape, jnp.float32), p)
    out = {}
    for impl, net in nets.items():
        def loss(q):
            logits = net.apply({"params": q}, X)
            return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, y[:, None], -1)[:, 0])

        out[impl] = jax.jit(lambda q: (loss(q), jax.grad(loss)(q), jax.jvp(jax.grad(loss), (q,), (z,))[1]))(p)
    assert models.conv_impl_for("native", jnp.float32) == "native"
    np.testing.assert_allclose(out["native"][0], out["im2col"][0], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(out["native"][1:]), jax.tree.leaves(out["im2col"][1:])):
        _close(a, b, 1e-4)


def test_fallbacks_and_bad_input():
    """float64 (and, without the library, float32) take im2col on CPU; shapes that do not fit
    are refused before anything compiles."""
    assert models.conv_impl_for("native", jnp.float64) == "im2col"
    assert models.conv_impl_for("auto", jnp.float64) == "im2col"
    assert models.conv_impl_for("auto", jnp.float32) == ("native" if native.available() else "im2col")
    with pytest.raises(ValueError, match="conv impl must be one of"):
        models.conv_impl_for("cudnn", jnp.float32)
    with pytest.raises(ValueError, match=r"x \[N, H, W, C\] and a kernel \[KH, KW, C, O\]"):
        native.conv2d_same(jnp.zeros((1, 4, 4, 3), jnp.float32), jnp.zeros((3, 3, 2, 1), jnp.float32))
    with pytest.raises(ValueError, match="one dtype"):
        native.conv2d_same(jnp.zeros((1, 4, 4, 2), jnp.float32), jnp.zeros((3, 3, 2, 1), jnp.float64))
