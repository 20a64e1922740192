/* OpenMP peers for `tiers bench`: `#pragma omp barrier` and `#pragma omp critical`, with the
 * team pinned to the given processors and timed by the master between an untimed barrier and
 * the end of its loop. Compiled by build.rs when the C compiler accepts -fopenmp. */
#define _GNU_SOURCE
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

static void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

double tiers_peer_omp_barrier(int threads, long iters, const int *cpus) {
    double elapsed = 0;
#pragma omp parallel num_threads(threads)
    {
        int me = omp_get_thread_num();
        pin(cpus ? cpus[me] : -1);
#pragma omp barrier
        double t0 = omp_get_wtime();
        for (long i = 0; i < iters; i++) {
#pragma omp barrier
        }
        if (me == 0) elapsed = omp_get_wtime() - t0;
    }
    return elapsed;
}

double tiers_peer_omp_critical(int threads, long iters, const int *cpus, uint64_t *count) {
    double elapsed = 0;
    volatile uint64_t counter = 0;
#pragma omp parallel num_threads(threads)
    {
        int me = omp_get_thread_num();
        pin(cpus ? cpus[me] : -1);
#pragma omp barrier
        double t0 = omp_get_wtime();
        for (long i = 0; i < iters; i++) {
#pragma omp critical
            counter += 1;
        }
#pragma omp barrier
        if (me == 0) elapsed = omp_get_wtime() - t0;
    }
    *count = counter;
    return elapsed;
}

/* The team size OpenMP actually gave (it may give fewer than asked). */
int tiers_peer_omp_team(int threads) {
    int n = 0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp single
        n = omp_get_num_threads();
    }
    return n;
}
