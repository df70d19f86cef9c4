import numpy as np
import pytest

from delaylab import theory

KW = dict(L=2.0, delta=3.0, sigma2=4.0, eps=0.01)


def test_homogeneous_bound_is_the_brute_force_minimum_over_prefixes():
    rng = np.random.default_rng(0)
    taus = rng.uniform(0.5, 20.0, 12)
    value, m = theory.homogeneous_lower_bound(taus, **KW)
    t = np.sort(taus)
    brute = [(k / np.sum(1 / t[:k])) * (KW["L"] * KW["delta"] / KW["eps"]
              + KW["sigma2"] * KW["L"] * KW["delta"] / (k * KW["eps"] ** 2)) for k in range(1, 13)]
    assert np.isclose(value, min(brute), rtol=1e-14) and m == int(np.argmin(brute)) + 1


def test_heterogeneous_bound_closed_form_and_ordering():
    taus = np.array([1.0, 2.0, 4.0, 8.0])
    L, D, s2, e = KW["L"], KW["delta"], KW["sigma2"], KW["eps"]
    het = theory.heterogeneous_lower_bound(taus, **KW)
    assert np.isclose(het, 8 * L * D / e + 3.75 * s2 * L * D / (4 * e**2), rtol=1e-14)
    hom, _ = theory.homogeneous_lower_bound(taus, **KW)
    # homogeneous ≤ vanilla (τ_H) ≤ heterogeneous ≤ minibatch (τ_n) for this profile
    assert hom <= theory.vanilla_asgd_homogeneous_time(taus, **KW) <= het <= theory.minibatch_sgd_time(taus, **KW)


def test_limits_from_the_spec():
    """τ_1 → 0: the homogeneous bound vanishes, the heterogeneous one barely moves; a growing
    straggler τ_n blows up the heterogeneous bound but not the homogeneous one (docs/theory.md §8)."""
    base = np.array([1.0, 2.0, 3.0, 4.0])
    fast = base.copy()
    fast[0] = 1e-6
    assert theory.homogeneous_lower_bound(fast, **KW)[0] < 1e-4 * theory.homogeneous_lower_bound(base, **KW)[0]
    assert theory.heterogeneous_lower_bound(fast, **KW) > 0.9 * theory.heterogeneous_lower_bound(base, **KW)
    slow = base.copy()
    slow[-1] = 1e4
    assert theory.heterogeneous_lower_bound(slow, **KW) > 100 * theory.heterogeneous_lower_bound(base, **KW)
    assert theory.homogeneous_lower_bound(slow, **KW)[0] < 1.5 * theory.homogeneous_lower_bound(base, **KW)[0]


def test_time_to_target():
    assert theory.time_to_target([0, 1, 2, 3], [5.0, 2.0, 0.5, 0.1], 0.5) == 2.0
    assert theory.time_to_target([0, 1], [5.0, 2.0], 0.5) == float("inf")


def test_bad_input():
    with pytest.raises(ValueError, match="eps must be positive"):
        theory.heterogeneous_lower_bound([1.0], L=1.0, delta=1.0, sigma2=1.0, eps=0.0)
    with pytest.raises(ValueError, match="taus must be"):
        theory.homogeneous_lower_bound([1.0, -1.0], **KW)
