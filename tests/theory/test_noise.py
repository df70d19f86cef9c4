import numpy as np
import pytest

from delaylab import theory


def _quad(seed=0, n=4, d=3):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, d, d))
    return M @ np.swapaxes(M, 1, 2) + np.eye(d), rng.standard_normal((n, d))


def test_vanilla_floor_is_gamma_sigma2_over_4_and_rescaled_ratio_is_am_over_hm():
    A, b = _quad()
    taus = np.array([1.0, 2.0, 4.0, 7.0])
    v = theory.noise_floor(A, b, taus, 0.01, sigma2=3.0)
    assert np.isclose(v.gap_weighted, 0.01 * 3.0 / 4, rtol=1e-14)
    r = theory.noise_floor(A, b, taus, theory.rescaled_stepsizes(0.01, taus), sigma2=3.0)
    assert np.isclose(r.gap_weighted / v.gap_weighted, theory.arithmetic_mean(taus) / theory.harmonic_mean(taus),
                      rtol=1e-12)
    assert r.bias_part < 1e-20 < v.bias_part  # Rescaled has no bias term; vanilla has
    # F gap = bias + noise share; with σ = 0 only the bias remains
    assert np.isclose(theory.noise_floor(A, b, taus, 0.01, sigma2=0.0).gap_true, v.bias_part, rtol=1e-12)


def test_quadratic_gaps():
    A, b = _quad(1)
    q = np.array([0.1, 0.2, 0.3, 0.4])
    xq = theory.quadratic_fixed_point(A, b, q)
    e = np.array([0.1, -0.2, 0.05])
    gaps = theory.quadratic_gaps(A, b, q, np.stack([xq, xq + e]))
    assert abs(gaps[0]) < 1e-25
    assert np.isclose(gaps[1], 0.5 * e @ np.einsum("i,ijk->jk", q, A) @ e, rtol=1e-12)


def test_bad_sigma2():
    A, b = _quad()
    with pytest.raises(ValueError, match="sigma2 must be finite and >= 0"):
        theory.noise_floor(A, b, [1.0, 2.0, 3.0, 4.0], 0.1, sigma2=-1.0)
