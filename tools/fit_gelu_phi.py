#!/usr/bin/env python3
"""Fits G, the degree-7 polynomial behind the float32 CPU GELU's Phi (kernels/cpu/vec_math.h,
phi_detail): erfc(y) ~= t G(t) exp(-y^2), t = 1 / (1 + p y), p = 0.3275911 (A&S 7.1.26's form).

A weighted minimax fit (Lawson's iteratively reweighted least squares) of G(t) = erfcx(y) / t on
the t of |v| = y sqrt 2 <= 13.5 (beyond it exp(-v^2 / 2) is 0 in float32), relative error
weighted 2e-8 for |v| <= 4 and 1e-7 beyond. Reference only (needs numpy and mpmath; neither the
build nor CI runs it): prints the coefficients vec_math.h halves, and the fit's relative errors.
    python3 tools/fit_gelu_phi.py
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 30
P = mp.mpf("0.3275911")
DEGREE, V_MAX, V_CORE = 7, 13.5, 4.0
CORE_TOLERANCE, TAIL_TOLERANCE = 2e-8, 1e-7


def main():
    t_lo = float(1 / (1 + P * V_MAX / mp.sqrt(2)))
    ts = np.linspace(t_lo, 1.0, 3000)
    ys = [(1 / mp.mpf(t) - 1) / P for t in ts]
    g = np.array([float(mp.erfc(y) * mp.exp(y * y) / mp.mpf(t)) for t, y in zip(ts, ys)])
    v = np.array([float(y) * np.sqrt(2) for y in ys])
    tolerance = np.where(v <= V_CORE, CORE_TOLERANCE, TAIL_TOLERANCE)
    vander = np.vander(ts, DEGREE + 1, increasing=True)
    weights = np.full(len(ts), 1.0 / len(ts))
    for _ in range(1000):
        scale = np.sqrt(weights) / tolerance
        coefficients, *_ = np.linalg.lstsq(vander * scale[:, None], g * scale, rcond=None)
        error = np.abs(vander @ coefficients - g) / g / tolerance
        weights = weights * error
        weights /= weights.sum()
    relative = np.abs(vander @ coefficients - g) / g
    for i, c in enumerate(coefficients):
        print(f"kG{i} = {c:.9e}")
    print(f"relative error of G: {relative[v <= V_CORE].max():.2e} for |v| <= {V_CORE}, "
          f"{relative.max():.2e} for |v| <= {V_MAX}")


if __name__ == "__main__":
    main()
