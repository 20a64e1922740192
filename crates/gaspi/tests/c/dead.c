/* The state vector reports a rank that is gone as corrupt: the last rank of three or more,
 * which terminates and exits by itself, and the ranks that rank 0 kills with gaspi_proc_kill
 * while they wait. Every process exits 0 (a killed rank ends with code 0, as under GPI-2), so
 * the job succeeds. Under mpirun, which ends the whole job when a rank ends without
 * MPI_Finalize (as a killed one does), the ranks only check that all are healthy. */
#include "check.h"
#include <time.h>
#include <unistd.h>

static double
now (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

int
main (void)
{
  alarm (60);
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  CHECK (gaspi_segment_create (0, 4096, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));
  gaspi_state_t st[256];
  CHECK (gaspi_state_vec_get (st));
  for (gaspi_rank_t r = 0; r < n; r++)
    TRUE (st[r] == GASPI_STATE_HEALTHY);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (getenv ("OMPI_COMM_WORLD_SIZE") != NULL || getenv ("PMI_SIZE") != NULL) {
    CHECK (gaspi_proc_term (GASPI_BLOCK));
    return 0;
  }
  const gaspi_rank_t leaver = n >= 3 ? n - 1 : n;
  gaspi_notification_id_t id;
  if (me == leaver) {
    /* Leaves when rank 0 says so. */
    gaspi_notification_t v;
    CHECK (gaspi_notify_waitsome (0, 0, 1, &id, GASPI_BLOCK));
    CHECK (gaspi_notify_reset (0, id, &v));
    CHECK (gaspi_proc_term (GASPI_BLOCK));
    return 0;
  }
  if (me != 0) {
    /* Waits until rank 0 kills it (nothing sets this notification). */
    CHECK (gaspi_notify_waitsome (0, 1, 1, &id, GASPI_BLOCK));
    fprintf (stderr, "rank %d: the wait returned; it should have been killed\n", me);
    return 1;
  }
  if (leaver < n) {
    CHECK (gaspi_notify (0, leaver, 0, 1, 0, GASPI_BLOCK));
    CHECK (gaspi_wait (0, GASPI_BLOCK));
    const double t0 = now ();
    do {
      CHECK (gaspi_state_vec_get (st));
      if (st[leaver] == GASPI_STATE_CORRUPT)
        break;
      usleep (1000);
    } while (now () - t0 < 30.0);
    TRUE (st[leaver] == GASPI_STATE_CORRUPT);
    for (gaspi_rank_t r = 0; r < leaver; r++)
      TRUE (st[r] == GASPI_STATE_HEALTHY);
  }
  for (gaspi_rank_t r = 1; r < n; r++)
    if (r != leaver)
      CHECK (gaspi_proc_kill (r, 20000));
  CHECK (gaspi_state_vec_get (st));
  TRUE (st[0] == GASPI_STATE_HEALTHY);
  for (gaspi_rank_t r = 1; r < n; r++)
    TRUE (st[r] == GASPI_STATE_CORRUPT);
  if (n > 1)
    EXPECT (gaspi_proc_ping (1, 1000), GASPI_ERROR);
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
