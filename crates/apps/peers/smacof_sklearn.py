#!/usr/bin/env python3
"""Peer for `tiers bench mds`: scikit-learn's SMACOF on the same matrix and start.

Usage: smacof_sklearn.py MATRIX.npy START.npy ITERATIONS
The benchmark runs it with one BLAS thread, to compare with tiers at one thread.
Prints one JSON object: seconds, iterations, seconds_per_iteration, stress (raw, of the
configuration after the last update, as scikit-learn 1.7+ reports it), sklearn version.
Exits with status 3 when scikit-learn is not importable.
"""
import json
import sys
import time

try:
    import numpy as np
    import sklearn
    from sklearn.manifold import smacof
except ImportError as e:  # the benchmark prints a note and goes on
    print(json.dumps({"error": f"scikit-learn not importable: {e}"}))
    sys.exit(3)


def main():
    d = np.load(sys.argv[1]).astype(np.float64)
    x0 = np.load(sys.argv[2]).astype(np.float64)
    iters = int(sys.argv[3])
    t0 = time.perf_counter()
    _, stress, n_iter = smacof(
        d,
        metric=True,
        n_components=x0.shape[1],
        init=x0,
        n_init=1,
        max_iter=iters,
        eps=0.0,
        normalized_stress=False,
        return_n_iter=True,
    )
    secs = time.perf_counter() - t0
    print(json.dumps({
        "seconds": secs,
        "iterations": int(n_iter),
        "seconds_per_iteration": secs / max(int(n_iter), 1),
        "stress": float(stress),
        "sklearn": sklearn.__version__,
    }))


if __name__ == "__main__":
    main()
