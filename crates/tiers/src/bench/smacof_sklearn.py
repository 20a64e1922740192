#!/usr/bin/env python3
"""Peer for `tiers bench mds`: scikit-learn's SMACOF on the same matrix and start.

Usage: smacof_sklearn.py MATRIX.npy START.npy
The benchmark writes this file out and runs it; it loads the matrix once, prints one JSON line
{"ready": true, "sklearn": VERSION, "blas_threads": N} and then answers every line K it reads
on stdin with one JSON line: the seconds of one smacof call with max_iter=1 and of one with
max_iter=K, run back to back from the same start, with the iteration counts scikit-learn
returned and the stress after the K-call (raw, of the configuration after the last update, as
scikit-learn 1.7+ reports it). The benchmark takes (t_k - t_1) / (K - 1), the marginal cost of
an iteration, so that input checks and the first distance matrix are not counted as iterations.
BLAS threads are what the environment gives (the benchmark sets them to 1 or leaves the
default). Exits with status 3 when scikit-learn is not importable.
"""
import json
import sys
import time

try:
    import numpy as np
    import sklearn
    from sklearn.manifold import smacof
except ImportError as e:  # the benchmark prints a note and goes on
    print(json.dumps({"error": f"scikit-learn not importable: {e}"}), flush=True)
    sys.exit(3)


def blas_threads():
    try:
        from threadpoolctl import threadpool_info

        return max((i.get("num_threads", 0) for i in threadpool_info()), default=0)
    except Exception:  # threadpoolctl is optional
        return 0


def timed(d, x0, iters):
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
    return time.perf_counter() - t0, float(stress), int(n_iter)


def main():
    d = np.load(sys.argv[1]).astype(np.float64)
    x0 = np.load(sys.argv[2]).astype(np.float64)
    print(
        json.dumps(
            {"ready": True, "sklearn": sklearn.__version__, "blas_threads": blas_threads()}
        ),
        flush=True,
    )
    for line in sys.stdin:
        k = int(line)
        t1, _, n1 = timed(d, x0, 1)
        tk, stress, nk = timed(d, x0, k)
        print(
            json.dumps({"t1": t1, "tk": tk, "n1": n1, "nk": nk, "stress": stress}),
            flush=True,
        )


if __name__ == "__main__":
    main()
