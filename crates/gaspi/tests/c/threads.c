/* The deprecated thread helpers: numbered threads, their barrier, and sync_all with the
 * ranks' barrier inside, which honours its timeout while declared threads are missing. */
#include "check.h"
#include <GASPI_Threads.h>
#include <time.h>
#include <unistd.h>

#define THREADS 3
#define ROUNDS 50

static volatile int arrivals[ROUNDS];

static void *
worker (void *arg)
{
  (void) arg;
  gaspi_int tid, total;
  CHECK (gaspi_threads_register (&tid));
  CHECK (gaspi_threads_get_total (&total));
  TRUE (tid >= 0 && tid < THREADS && total == THREADS);
  for (int k = 0; k < ROUNDS; k++) {
    __atomic_fetch_add (&arrivals[k], 1, __ATOMIC_SEQ_CST);
    gaspi_threads_sync ();
    /* Nobody leaves round k before all arrived. */
    TRUE (__atomic_load_n (&arrivals[k], __ATOMIC_SEQ_CST) == THREADS);
  }
  CHECK (gaspi_threads_sync_all (GASPI_GROUP_ALL, GASPI_BLOCK));
  return NULL;
}

static double
now (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

static volatile int late_ret = -100;

static void *
late_worker (void *arg)
{
  (void) arg;
  gaspi_int tid;
  CHECK (gaspi_threads_register (&tid));
  __atomic_store_n (&late_ret, gaspi_threads_sync_all (GASPI_GROUP_ALL, GASPI_BLOCK),
                    __ATOMIC_SEQ_CST);
  return NULL;
}

int
main (void)
{
  /* A call that hangs fails the test rather than holding it. */
  alarm (60);
  gaspi_int tid;
  EXPECT (gaspi_threads_get_tid (&tid), GASPI_ERROR);
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_int cores;
  CHECK (gaspi_threads_get_num_cores (&cores));
  TRUE (cores >= 1);
  CHECK (gaspi_threads_init_user (THREADS));
  EXPECT (gaspi_threads_init_user (THREADS), GASPI_ERROR);
  CHECK (gaspi_threads_register (&tid));
  TRUE (tid == 0);
  for (int i = 1; i < THREADS; i++)
    CHECK (gaspi_threads_run (worker, NULL));
  gaspi_int total;
  CHECK (gaspi_threads_get_total (&total));
  TRUE (total == THREADS);
  for (int k = 0; k < ROUNDS; k++) {
    __atomic_fetch_add (&arrivals[k], 1, __ATOMIC_SEQ_CST);
    gaspi_threads_sync ();
    TRUE (__atomic_load_n (&arrivals[k], __ATOMIC_SEQ_CST) == THREADS);
  }
  CHECK (gaspi_threads_sync_all (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_threads_term ());

  /* Two threads declared, one calling: sync_all times out (and takes its arrival back), then
   * completes once the other comes. */
  CHECK (gaspi_threads_init_user (2));
  CHECK (gaspi_threads_register (&tid));
  const double t0 = now ();
  EXPECT (gaspi_threads_sync_all (GASPI_GROUP_ALL, 100), GASPI_TIMEOUT);
  TRUE (now () - t0 < 2.0);
  EXPECT (gaspi_threads_sync_all (GASPI_GROUP_ALL, GASPI_TEST), GASPI_TIMEOUT);
  CHECK (gaspi_threads_run (late_worker, NULL));
  CHECK (gaspi_threads_sync_all (GASPI_GROUP_ALL, GASPI_BLOCK));
  while (__atomic_load_n (&late_ret, __ATOMIC_SEQ_CST) == -100)
    usleep (1000);
  CHECK (late_ret);
  CHECK (gaspi_threads_term ());
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
