"""The convolution of the CNN problems: :class:`Conv2D`, a stride-1 "SAME" convolution that
computes by one of three routes: XLA's (``lax``), one matrix product over shifted windows
(:func:`conv2d_im2col`) or oneDNN's kernels (:mod:`sim.native`). Which one "auto" takes is
:func:`sim.native.conv_impl_for`'s rule: on CPU the native one where it is built (float32), else
im2col, since XLA's CPU convolution is slow inside the engine's loops (benchmarks/RESULTS.md);
XLA's own on other backends.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from delaylab.sim import native
from delaylab.sim.native import CONV_IMPLS, conv_impl_for

__all__ = ["CONV_IMPLS", "Conv2D", "conv2d_im2col", "conv_impl_for"]


def conv2d_im2col(x, kernel):
    """A stride-1 "SAME" convolution of [B, H, W, C] by an HWIO kernel as one matrix product: the
    kernel's shifted windows stacked along the channel axis (im2col), then a dot with the kernel
    reshaped to [kh·kw·C, O]."""
    kh, kw, cin, cout = kernel.shape
    B, H, W, _ = x.shape
    ph, pw = (kh - 1) // 2, (kw - 1) // 2
    xp = jnp.pad(x, ((0, 0), (ph, kh - 1 - ph), (pw, kw - 1 - pw), (0, 0)))
    cols = jnp.concatenate([xp[:, i:i + H, j:j + W, :] for i in range(kh) for j in range(kw)], axis=-1)
    return cols @ kernel.reshape(kh * kw * cin, cout)


class Conv2D(nn.Module):
    """A 5×5 (``size``) stride-1 "SAME" convolution with bias, HWIO kernel (the parameters of
    ``flax.linen.Conv``: ``kernel`` lecun-normal, ``bias`` zeros). ``impl``: "lax"
    (``lax.conv_general_dilated``), "im2col" (:func:`conv2d_im2col`), "native" (oneDNN through
    ``jax.ffi``, :mod:`sim.native`; float32 on CPU, else im2col) or "auto": on CPU "native"
    where it is built, else im2col; XLA's convolution on other backends (see
    :func:`conv_impl_for`)."""

    features: int
    size: int = 5
    impl: str = "auto"

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (self.size, self.size, x.shape[-1], self.features),
                            x.dtype)
        bias = self.param("bias", nn.initializers.zeros, (self.features,), x.dtype)
        dt = jnp.result_type(x, kernel)
        x, kernel, bias = x.astype(dt), kernel.astype(dt), bias.astype(dt)
        impl = conv_impl_for(self.impl, dt)
        if impl == "im2col":
            y = conv2d_im2col(x, kernel)
        elif impl == "native":
            y = native.conv2d_same(x, kernel)
        else:
            y = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y + bias.reshape((1,) * (y.ndim - 1) + (-1,))
