import numpy as np
import pytest

import theory


def test_frequency_weights_closed_form():
    taus = np.array([1.0, 1.5, 2.0, 3.0, 5.0, 8.0])
    p = theory.frequency_weights(taus)
    tau_h = len(taus) / np.sum(1 / taus)
    np.testing.assert_allclose(p, tau_h / (len(taus) * taus), rtol=1e-14)
    # the table of specs/asgd.md §2.4 (measured there, printed to 3 digits)
    np.testing.assert_allclose(p, [0.353, 0.236, 0.177, 0.118, 0.071, 0.044], atol=1e-3)


def test_rescaled_steps_give_uniform_weights_and_mean_step_gamma():
    taus = np.array([1.0, 2.0, 4.0, 9.0])
    g = theory.rescaled_stepsizes(0.1, taus)
    np.testing.assert_allclose(theory.implicit_weights(g, taus), 0.25, rtol=1e-14)
    rate = 1 / taus
    assert np.isclose(np.sum(rate * g) / np.sum(rate), 0.1, rtol=1e-14)  # mean step per update


def test_two_worker_closed_form():
    # n = 2, τ = (1, κ), a_i = 1, b = (−1, +1): x_p = (1 − κ)/(1 + κ) (specs/asgd.md §2.3)
    for kappa in (1.0, 2.0, 10.0):
        p = theory.frequency_weights([1.0, kappa])
        xp = theory.quadratic_fixed_point(np.ones((2, 1)), np.array([[-1.0], [1.0]]), p)
        assert np.isclose(xp[0], (1 - kappa) / (1 + kappa), rtol=1e-14)


def test_dense_and_diagonal_agree_and_scalar_formula():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, (4, 3))
    b = rng.standard_normal((4, 3))
    q = rng.uniform(0.1, 1.0, 4)
    diag = theory.quadratic_fixed_point(a, b, q)
    dense = theory.quadratic_fixed_point(np.stack([np.diag(r) for r in a]), b, q)
    np.testing.assert_allclose(diag, dense, rtol=1e-13)
    np.testing.assert_allclose(diag, (q @ (a * b)) / (q @ a), rtol=1e-13)


def test_gap_is_zero_at_optimum_and_quadratic_in_error():
    rng = np.random.default_rng(1)
    M = rng.standard_normal((3, 4, 4))
    A = M @ np.swapaxes(M, 1, 2) + np.eye(4)
    b = rng.standard_normal((3, 4))
    xs = theory.quadratic_fixed_point(A, b, np.ones(3))
    gap, gn = theory.quadratic_gap(A, b, xs)
    assert gap < 1e-24 and gn < 1e-12
    e = rng.standard_normal(4) * 1e-2
    gap2, _ = theory.quadratic_gap(A, b, xs + e)
    assert np.isclose(gap2, 0.5 * e @ A.mean(0) @ e, rtol=1e-8)


def test_weighted_minimiser_matches_closed_form_on_quadratic():
    rng = np.random.default_rng(2)
    M = rng.standard_normal((3, 2, 2))
    A = M @ np.swapaxes(M, 1, 2) + 0.5 * np.eye(2)
    b = rng.standard_normal((3, 2))

    def derivs(x):
        G = np.einsum("ijk,ik->ij", A, x[None] - b)
        return G, A

    q = np.array([0.2, 0.5, 0.3])
    np.testing.assert_allclose(theory.weighted_minimiser(derivs, q, np.zeros(2)),
                               theory.quadratic_fixed_point(A, b, q), rtol=1e-10)


@pytest.mark.parametrize("bad", [[1.0, 0.0], [1.0, -2.0], [np.nan, 1.0], []])
def test_bad_taus_rejected(bad):
    with pytest.raises(ValueError, match="taus must be"):
        theory.frequency_weights(bad)


def test_check_report_verdicts():
    ok = theory.Check("s", "a", "q", predicted=1.0, measured=1.05, tolerance=0.1)
    bad = theory.Check("s", "a", "q", predicted=1.0, measured=1.2, tolerance=0.1)
    nan = theory.Check("s", "a", "q", predicted=1.0, measured=float("nan"), tolerance=0.1)
    assert ok.passed and not bad.passed and not nan.passed
    table = theory.format_table([ok, bad])
    assert "pass" in table and "FAIL" in table
    assert set(ok.as_dict()) == {"scenario", "algorithm", "quantity", "predicted", "measured", "tolerance", "passed"}
