import numpy as np
import pytest

from delaylab import theory


def test_frequency_weights_closed_form():
    taus = np.array([1.0, 1.5, 2.0, 3.0, 5.0, 8.0])
    p = theory.frequency_weights(taus)
    tau_h = len(taus) / np.sum(1 / taus)
    np.testing.assert_allclose(p, tau_h / (len(taus) * taus), rtol=1e-14)
    # the example of docs/theory.md §6 (printed to 3 digits)
    np.testing.assert_allclose(p, [0.353, 0.236, 0.177, 0.118, 0.071, 0.044], atol=1e-3)


def test_rescaled_steps_give_uniform_weights_and_mean_step_gamma():
    taus = np.array([1.0, 2.0, 4.0, 9.0])
    g = theory.rescaled_stepsizes(0.1, taus)
    np.testing.assert_allclose(theory.implicit_weights(g, taus), 0.25, rtol=1e-14)
    rate = 1 / taus
    assert np.isclose(np.sum(rate * g) / np.sum(rate), 0.1, rtol=1e-14)  # mean step per update


def test_two_worker_closed_form():
    # n = 2, τ = (1, κ), a_i = 1, b = (−1, +1): x_p = (1 − κ)/(1 + κ) (docs/theory.md §3)
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
    assert set(ok.as_dict()) == {"scenario", "algorithm", "quantity", "predicted", "measured", "tolerance",
                                 "tolerance_from", "independent", "schedule_based", "passed"}
    assert "tolerance from" not in table  # no row says how its tolerance was obtained: no column
    implied = theory.Check("s", "a", "q2", 1.0, 1.2, 0.1, "10% of x", independent=False)
    table = theory.format_table([ok, implied])
    assert "tolerance from" in table and "10% of x; implied by the row above" in table
    # the count leaves the implied row out; its failure is still reported
    assert theory.summary_line([ok, implied]) == "1 of 1 independent checks pass (1 more rows, implied by those, shown); 1 FAIL"
    assert theory.summary_line([ok, bad]) == "1 of 2 independent checks pass; 1 FAIL"
    # a schedule-based row: counted apart, marked in the table
    read_off = theory.Check("s", "a", "q3", 1.0, 1.0, 0.1, "x", schedule_based=True)
    assert not read_off.counted and not read_off.as_dict()["independent"]
    assert "x; schedule-based prediction" in theory.format_table([ok, read_off])
    assert theory.summary_line([ok, read_off]) == ("1 of 1 independent checks pass; 1 of 1 schedule-based rows "
                                                   "(prediction read off the realised schedule) pass")


def _quadratic_derivatives(A, b):
    return lambda x: (np.einsum("ijk,ik->ij", A, x[None] - b), A)


def test_clipped_fixed_point_closed_form_1d():
    """q = (3/4, 1/4), b = (0, 10), c = 1: the far worker is clipped, so 0.75 x − 0.25 = 0."""
    A = np.ones((2, 1, 1))
    b = np.array([[0.0], [10.0]])
    x = theory.clipped_fixed_point(_quadratic_derivatives(A, b), [0.75, 0.25], 1.0, [5.0])
    np.testing.assert_allclose(x, [1.0 / 3.0], atol=1e-12)
    # Unclipped it would be the weighted mean 2.5.
    np.testing.assert_allclose(theory.quadratic_fixed_point(A, b, [0.75, 0.25]), [2.5], atol=1e-12)


def test_clipped_fixed_point_is_x_q_when_nothing_is_clipped_and_a_root_otherwise():
    rng = np.random.default_rng(3)
    n, d = 5, 4
    M = rng.standard_normal((n, d, d))
    A = np.einsum("nij,nkj->nik", M, M) + np.eye(d)
    b = 2 * rng.standard_normal((n, d))
    q = rng.uniform(0.5, 1.5, n)
    q /= q.sum()
    der = _quadratic_derivatives(A, b)
    x_q = theory.quadratic_fixed_point(A, b, q)
    np.testing.assert_allclose(theory.clipped_fixed_point(der, q, 1e6, np.zeros(d)), x_q, atol=1e-10)
    x_c = theory.clipped_fixed_point(der, q, 0.5, np.zeros(d))
    G, _ = der(x_c)
    norms = np.linalg.norm(G, axis=1)
    assert np.sum(norms > 0.5) >= 3  # clipping is active for most workers
    clipped = G * np.minimum(1.0, 0.5 / norms)[:, None]
    assert np.linalg.norm(q @ clipped) < 1e-10
    assert np.linalg.norm(x_c - x_q) > 0.1
