/* A peer that stops (SIGSTOP) for a while: calls that need it and carry a timeout return
 * within about that timeout (GASPI_SUCCESS where the engine needs no answer from the peer:
 * the memory engines), and what they started completes once it runs again: the read's data
 * and its local notification after gaspi_wait, and the atomics, called again, applied once. */
#include "check.h"
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double
now (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The call returns SUCCESS or TIMEOUT, in less than 2 s (its timeout is 200 ms; the peer
 * stays stopped for 4 s). */
#define WITHIN(call, rc)                                                                    \
  do {                                                                                      \
    double t0_ = now ();                                                                    \
    rc = (call);                                                                            \
    double s_ = now () - t0_;                                                               \
    if ((rc != GASPI_SUCCESS && rc != GASPI_TIMEOUT) || s_ > 2.0) {                         \
      fprintf (stderr, "%s:%d: %s returned %d after %.3f s\n", __FILE__, __LINE__, #call,  \
               (int) rc, s_);                                                               \
      exit (1);                                                                             \
    }                                                                                       \
  } while (0)

static pid_t peer;

static void *
wake (void *arg)
{
  (void) arg;
  sleep (4);
  kill (peer, SIGCONT);
  return NULL;
}

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  CHECK (gaspi_segment_create (0, 1 << 20, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));
  long *p;
  CHECK (gaspi_segment_ptr (0, (gaspi_pointer_t *) &p));
  /* Alone there is no peer to stop. Under mpirun with MPI windows
   * (TIERS_MPI_ONESIDED=window) the atomics and reads to another host wait inside MPI,
   * whose progress a stopped peer holds (documented: that mode does not bound them). */
  const char *onesided = getenv ("TIERS_MPI_ONESIDED");
  int mpi = getenv ("OMPI_COMM_WORLD_SIZE") != NULL || getenv ("PMI_SIZE") != NULL;
  if (n < 2 || (mpi && onesided != NULL && strcmp (onesided, "window") == 0)) {
    CHECK (gaspi_proc_term (GASPI_BLOCK));
    return 0;
  }
  /* Rank 1's pid, and the 64 KiB that rank 0 reads, at byte 4096 of rank 1's segment. */
  if (me == 1) {
    for (int i = 0; i < 8192; i++)
      p[512 + i] = 7 * i + 1;
    p[100] = getpid ();
    CHECK (gaspi_write (0, 800, 0, 0, 800, 8, 0, GASPI_BLOCK));
    CHECK (gaspi_wait (0, GASPI_BLOCK));
  }
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (me == 1) {
    raise (SIGSTOP);
  } else if (me == 0) {
    peer = (pid_t) p[100];
    usleep (300 * 1000);
    pthread_t waker;
    TRUE (pthread_create (&waker, NULL, wake, NULL) == 0);
    gaspi_return_t rc, add_rc, cas_rc;
    gaspi_atomic_value_t old;
    WITHIN (gaspi_read_notify (0, 1 << 16, 1, 0, 4096, 65536, 3, 1, 200), rc);
    /* A second read, on another queue, that the program waits for by its notification. */
    gaspi_return_t rc2;
    WITHIN (gaspi_read_notify (0, 3 << 16, 1, 0, 4096, 4096, 4, 2, 200), rc2);
    WITHIN (gaspi_atomic_fetch_add (0, 0, 1, 5, &old, 200), add_rc);
    WITHIN (gaspi_atomic_compare_swap (0, 8, 1, 0, 9, &old, 200), cas_rc);
    TRUE (pthread_join (waker, NULL) == 0);
    /* Without a gaspi_wait of its queue, the second read's notification comes. */
    gaspi_notification_id_t got;
    CHECK (gaspi_notify_waitsome (0, 4, 1, &got, 10000));
    TRUE (got == 4);
    for (int i = 0; i < 512; i++)
      TRUE (p[3 * 8192 + i] == 7 * i + 1);
    CHECK (gaspi_wait (2, GASPI_BLOCK));
    (void) rc2;
    /* The read completes at the queue's wait, and its notification is then set. */
    CHECK (gaspi_wait (1, GASPI_BLOCK));
    gaspi_notification_id_t first;
    CHECK (gaspi_notify_waitsome (0, 3, 1, &first, GASPI_TEST));
    TRUE (first == 3);
    gaspi_notification_t v;
    CHECK (gaspi_notify_reset (0, 3, &v));
    TRUE (v == 1);
    for (int i = 0; i < 8192; i++)
      TRUE (p[8192 + i] == 7 * i + 1);
    /* A timed-out atomic called again resumes: it is applied once, and answers the old value. */
    if (add_rc == GASPI_TIMEOUT) {
      CHECK (gaspi_atomic_fetch_add (0, 0, 1, 5, &old, GASPI_BLOCK));
      TRUE (old == 0);
    }
    if (cas_rc == GASPI_TIMEOUT) {
      CHECK (gaspi_atomic_compare_swap (0, 8, 1, 0, 9, &old, GASPI_BLOCK));
      TRUE (old == 0);
    }
  }
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (me == 1) {
    /* Each atomic was applied once. */
    TRUE (p[0] == 5);
    TRUE (p[1] == 9);
  }
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
