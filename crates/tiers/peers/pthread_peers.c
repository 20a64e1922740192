/* Peers for `tiers bench`: the POSIX threads barrier and mutex, measured the way the tiers
 * primitives are (threads pinned to the given processors, the time taken by thread 0 between
 * an untimed start barrier and the end of its loop). Compiled by build.rs when a C compiler is
 * present. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

struct job {
    int tid;
    int cpu;
    long iters;
    pthread_barrier_t *start;
    pthread_barrier_t *barrier;
    pthread_mutex_t *mutex;
    volatile uint64_t *counter;
    double elapsed;
};

static void *barrier_thread(void *arg) {
    struct job *j = arg;
    pin(j->cpu);
    pthread_barrier_wait(j->start);
    double t0 = now();
    for (long i = 0; i < j->iters; i++) pthread_barrier_wait(j->barrier);
    j->elapsed = now() - t0;
    return 0;
}

static void *mutex_thread(void *arg) {
    struct job *j = arg;
    pin(j->cpu);
    pthread_barrier_wait(j->start);
    double t0 = now();
    for (long i = 0; i < j->iters; i++) {
        pthread_mutex_lock(j->mutex);
        *j->counter += 1;
        pthread_mutex_unlock(j->mutex);
    }
    pthread_barrier_wait(j->start);
    j->elapsed = now() - t0;
    return 0;
}

/* Runs `iters` pthread_barrier_wait on `threads` threads; returns thread 0's seconds. */
double tiers_peer_pthread_barrier(int threads, long iters, const int *cpus) {
    pthread_barrier_t start, barrier;
    pthread_barrier_init(&start, 0, threads);
    pthread_barrier_init(&barrier, 0, threads);
    struct job *jobs = calloc(threads, sizeof *jobs);
    pthread_t *ts = calloc(threads, sizeof *ts);
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){i, cpus ? cpus[i] : -1, iters, &start, &barrier, 0, 0, 0};
        if (i) pthread_create(&ts[i], 0, barrier_thread, &jobs[i]);
    }
    barrier_thread(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(ts[i], 0);
    double e = jobs[0].elapsed;
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&barrier);
    free(jobs);
    free(ts);
    return e;
}

/* `threads` threads each increment a shared counter `iters` times under a pthread mutex;
 * returns the seconds until all are done, and the final count through `count`. */
double tiers_peer_pthread_mutex(int threads, long iters, const int *cpus, uint64_t *count) {
    pthread_barrier_t start;
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    volatile uint64_t counter = 0;
    pthread_barrier_init(&start, 0, threads);
    struct job *jobs = calloc(threads, sizeof *jobs);
    pthread_t *ts = calloc(threads, sizeof *ts);
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){i, cpus ? cpus[i] : -1, iters, &start, 0, &mutex, &counter, 0};
        if (i) pthread_create(&ts[i], 0, mutex_thread, &jobs[i]);
    }
    mutex_thread(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(ts[i], 0);
    double e = jobs[0].elapsed;
    *count = counter;
    pthread_barrier_destroy(&start);
    free(jobs);
    free(ts);
    return e;
}
