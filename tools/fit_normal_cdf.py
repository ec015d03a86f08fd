#!/usr/bin/env python3
"""Fits the two approximations of src/backend/cpu/cpu_vector_math.h's
vector_normal_cdf_avx2 and prints their coefficients (as float literals, in
the header's order: highest degree first) and errors.

  near, |z| < 0.75:  erf(z) / z = P(z^2), P of degree 5;
  far, 0.75 <= a <= 10:  log(erfc(a)) + a^2 - log(t) = G(t), t = 1 / (1 + a / 2),
                         G of degree 8, so erfc(a) = t exp(G(t) - a^2).

Each fit is least squares on Chebyshev nodes, reweighted towards the
minimax (Lawson's iteration), against mpmath at 30 digits; then the float
evaluation of the whole Phi(x) = erfc(-x / sqrt 2) / 2 as the header does it
(float rounding after each operation, FMA as one rounding) is compared with
mpmath over x in [-14.5, 14.5]. Needs numpy and mpmath (development only:
the header holds the printed numbers; tests/test_cpu_vector_math.c checks
the C code against libm in double).

    python3 tools/fit_normal_cdf.py
"""
import numpy as np
import mpmath as mp

mp.mp.dps = 30
NEAR_LIMIT, T_SCALE, A_MAX = 0.75, 0.5, 10.0
NEAR_DEGREE, FAR_DEGREE = 5, 8
f32 = np.float32


def chebyshev_nodes(low, high, count):
    k = np.arange(count)
    return (low + high) / 2 + (high - low) / 2 * np.cos((2 * k + 1) * np.pi / (2 * count))


def lawson_fit(values, weights, variable, degree, rounds=30):
    """Polynomial in `variable` minimising max |(p - values) * weights|."""
    vandermonde = np.vander(variable, degree + 1, increasing=True)
    lawson = np.ones_like(values)
    for _ in range(rounds):
        w = np.sqrt(lawson) * weights
        coefficients, *_ = np.linalg.lstsq(vandermonde * w[:, None], values * w, rcond=None)
        error = np.abs((vandermonde @ coefficients - values) * weights)
        lawson = lawson * error
        lawson /= lawson.sum()
    return coefficients, np.max(np.abs((vandermonde @ coefficients - values) * weights))


def fma(a, b, c):
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(f32)


def horner(coefficients, x):
    p = np.full_like(x, f32(coefficients[-1]))
    for c in coefficients[-2::-1]:
        p = fma(p, x, np.full_like(x, f32(c)))
    return p


def phi_float(x, near, far):
    """The header's evaluation, one float rounding per operation."""
    z = (x * f32(-0.70710678118654752)).astype(f32)
    a = np.minimum(f32(A_MAX), np.abs(z))
    square = (a * a).astype(f32)
    square_error = fma(a, a, -square)
    s = (z * z).astype(f32)
    erfc_near = fma(-z, horner(near, s), np.ones_like(z))
    t = (f32(1) / fma(a, np.full_like(a, f32(T_SCALE)), np.ones_like(a))).astype(f32)
    exponent = ((horner(far, t) - square).astype(f32) - square_error).astype(f32)
    erfc_a = (t * np.exp(exponent).astype(f32)).astype(f32)
    erfc_far = np.where(z < 0, (f32(2) - erfc_a).astype(f32), erfc_a)
    return (f32(0.5) * np.where(a < f32(NEAR_LIMIT), erfc_near, erfc_far)).astype(f32)


def main():
    zs = chebyshev_nodes(1e-6, NEAR_LIMIT, 2000)
    erf_over_z = np.array([float(mp.erf(mp.mpf(z)) / mp.mpf(z)) for z in zs])
    near, near_error = lawson_fit(erf_over_z, 1 / np.abs(erf_over_z), zs**2, NEAR_DEGREE)
    a_nodes = chebyshev_nodes(NEAR_LIMIT, A_MAX, 3000)
    ts = 1 / (1 + T_SCALE * a_nodes)
    g = np.array([float(mp.log(mp.erfc(mp.mpf(a))) + mp.mpf(a)**2
                        - mp.log(1 / (1 + T_SCALE * mp.mpf(a)))) for a in a_nodes])
    far, far_error = lawson_fit(g, np.ones_like(g), ts, FAR_DEGREE)
    print(f"P (erf(z)/z, degree {NEAR_DEGREE}), relative error {near_error:.3g}:")
    print("  " + ", ".join(f"{float(f32(c))!r}f" for c in near[::-1]))
    print(f"G (degree {FAR_DEGREE} in t), absolute error {far_error:.3g}:")
    print("  " + ", ".join(f"{float(f32(c))!r}f" for c in far[::-1]))

    xs = np.linspace(-14.5, 14.5, 60001).astype(f32)
    want = np.array([float(mp.ncdf(mp.mpf(float(x)))) for x in xs])
    got = phi_float(xs, near, far).astype(np.float64)
    relative = np.abs(got - want) / np.maximum(want, 1e-300)
    for floor in (1e-3, 1e-10, 1e-30):
        print(f"float Phi(x) against mpmath, relative error where Phi > {floor:g}: "
              f"{relative[want > floor].max():.3g}")


if __name__ == "__main__":
    main()
