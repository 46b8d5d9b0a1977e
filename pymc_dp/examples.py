"""Built-in models and synthetic data for examples, tests and benchmarks.

Everything here is generated from public seeds: no real private data ships with the package.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm

__all__ = ["Banana", "banana", "synthetic_patients", "logistic_regression_model"]


@dataclass(frozen=True)
class Banana:
    """The Bayesian banana model of Raisa (2021), Theorem 12, with b = m = 0.

    ``theta ~ Ban(0, sigma0^2 I, a)``; ``x_1 ~ N(theta_1, s_1^2)``,
    ``x_2 ~ N(theta_2 + a theta_1^2, s_2^2)``, ``x_i ~ N(theta_i, s_i^2)`` for i > 2. The
    posterior tempered with T is ``Ban(mu, Sigma, a)`` with ``Sigma_ii = 1 / (T n tau_i + tau_0)``
    and ``mu_i = T n tau_i xbar_i Sigma_ii`` (tau = 1 / variance), so exact draws are available.
    ``a = 0`` gives the Gaussian model.
    """

    data: np.ndarray
    a: float
    likelihood_var: np.ndarray
    prior_var: float
    tempering: float = 1.0

    @property
    def n(self) -> int:
        return self.data.shape[0]

    @property
    def d(self) -> int:
        return self.data.shape[1]

    def model(self) -> pm.Model:
        """A PyMC model of the (tempered) banana posterior; rows of ``data`` are people."""
        sd = np.sqrt(self.likelihood_var)
        with pm.Model() as model:
            theta = pm.Flat("theta", shape=self.d)
            # Banana prior Ban(0, sigma0^2 I, a): g^{-1}(theta) ~ N(0, sigma0^2 I), Jacobian 1.
            u = pm.math.concatenate([theta[:1], theta[1:2] + self.a * theta[:1] ** 2, theta[2:]])
            pm.Potential(
                "banana_prior", pm.logp(pm.Normal.dist(0, np.sqrt(self.prior_var)), u).sum()
            )
            mean = pm.math.concatenate([theta[:1], theta[1:2] + self.a * theta[:1] ** 2, theta[2:]])
            if self.tempering == 1.0:
                pm.Normal("x", mean, sd, observed=self.data)
            else:
                pm.CustomDist(
                    "x",
                    mean,
                    sd,
                    logp=lambda v, m, s: self.tempering * pm.logp(pm.Normal.dist(m, s), v),
                    observed=self.data,
                )
        return model

    def posterior_params(self) -> tuple[np.ndarray, np.ndarray]:
        tau = 1.0 / self.likelihood_var
        prec = self.tempering * self.n * tau + 1.0 / self.prior_var
        mean = self.tempering * self.n * tau * self.data.mean(axis=0) / prec
        return mean, 1.0 / prec

    def exact_posterior(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` exact draws from the posterior, shape (size, d)."""
        mean, var = self.posterior_params()
        z = mean + np.sqrt(var) * rng.standard_normal((size, self.d))
        z[:, 1] -= self.a * z[:, 0] ** 2
        return z


def banana(
    n: int = 100_000,
    d: int = 2,
    a: float = 20.0,
    *,
    theta: np.ndarray | None = None,
    likelihood_var: np.ndarray | None = None,
    prior_var: float = 1000.0,
    tempering: float = 1.0,
    seed: int = 0,
) -> Banana:
    """Data from the banana model; defaults are the thesis' "easy-2d" setting (Table 6.1).

    Likelihood variances 20, 2.5, then 1; true theta = (0, 3, 0, ...).
    """
    rng = np.random.default_rng(seed)
    if likelihood_var is None:
        likelihood_var = np.ones(d)
        likelihood_var[:2] = [20.0, 2.5][: min(d, 2)]
    likelihood_var = np.asarray(likelihood_var, dtype=float)
    if theta is None:
        theta = np.zeros(d)
        if d > 1:
            theta[1] = 3.0
    mean = np.array(theta, dtype=float)
    if d > 1:
        mean[1] = theta[1] + a * theta[0] ** 2
    x = mean + np.sqrt(likelihood_var) * rng.standard_normal((n, d))
    return Banana(x, float(a), likelihood_var, float(prior_var), float(tempering))


def synthetic_patients(n: int = 2000, seed: int = 0) -> dict[str, np.ndarray]:
    """Synthetic patients: standardised age, BMI, smoker and treatment flags, and an outcome.

    Covariates are bounded (standardised values clipped to [-3, 3]), as a data owner would publish
    their public ranges; the outcome follows a logistic model with known coefficients.
    """
    rng = np.random.default_rng(seed)
    age = np.clip(rng.normal(0, 1, n), -3, 3)
    bmi = np.clip(0.3 * age + rng.normal(0, 1, n), -3, 3)
    smoker = rng.binomial(1, 0.25, n).astype(float)
    treated = rng.binomial(1, 0.5, n).astype(float)
    X = np.column_stack([np.ones(n), age, bmi, smoker, treated])
    beta = np.array([-1.0, 0.8, 0.5, 0.7, -1.2])
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ beta)))
    return {
        "X": X,
        "y": y,
        "beta": beta,
        "names": np.array(["intercept", "age", "bmi", "smoker", "treated"]),
    }


def logistic_regression_model(X: np.ndarray, y: np.ndarray, prior_sd: float = 5.0) -> pm.Model:
    """Bayesian logistic regression with one row of (X, y) per person."""
    with pm.Model(coords={"coef": np.arange(X.shape[1])}) as model:
        beta = pm.Normal("beta", 0, prior_sd, dims="coef")
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    return model
