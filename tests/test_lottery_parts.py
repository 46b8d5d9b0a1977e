"""The yardstick of ``benchmarks.lottery_parts``: its reference is the exact posterior mode and
the Laplace sds there, in the fit's coordinates (what its wide and beyond-3 counts are read
against)."""

import numpy as np
from statsmodels.datasets import cancer

import pymc_dp as pdp
from benchmarks.lottery_parts import case, reference


def test_the_reference_is_the_exact_mode_and_its_laplace_sds():
    """statsmodels' cancer (Poisson, 301 rows, prior N(0, 5^2)): at the reference the score
    equation holds and the sds are those of the inverse negative Hessian, computed here by
    hand from the rows."""
    m, clips, budgets = case("cancer")
    mode, sd = reference(m)
    df = cancer.load_pandas().data
    X = pdp.encode_covariates(
        df.assign(logpop=np.log(df["population"])), {"logpop": (np.log(100), np.log(100_000))}
    ).X
    y = df["cancer"].to_numpy(float)
    mu = np.exp(X @ mode)
    score = X.T @ (y - mu) - mode / 25.0
    # relative to the rows' own scale (counts up to ~1e4): BFGS's gradient tolerance
    assert np.max(np.abs(score)) < 1e-6 * np.sum(y), score
    hessian = (X.T * mu) @ X + np.eye(2) / 25.0
    np.testing.assert_allclose(sd, np.sqrt(np.diag(np.linalg.inv(hessian))), rtol=1e-4)
    assert set(clips) == {"grad_clip", "hess_clip"} and budgets == (4.0,)
