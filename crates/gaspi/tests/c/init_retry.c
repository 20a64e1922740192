/* gaspi_proc_init called with GASPI_TEST until it succeeds, while rank 1 (as the launcher
 * numbers it) starts late: every rank ends in one working world, whichever step (the join or
 * the heap) each call stopped at. */
#include "check.h"
#include <time.h>
#include <unistd.h>

int
main (void)
{
  const char *rank = getenv ("TIERS_RANK");
  if (rank != NULL && atoi (rank) == 1)
    usleep (300 * 1000);
  gaspi_return_t r;
  long tries = 0;
  while ((r = gaspi_proc_init (GASPI_TEST)) != GASPI_SUCCESS) {
    TRUE (r == GASPI_TIMEOUT);
    TRUE (++tries < 1000000);
    usleep (200);
  }
  EXPECT (gaspi_proc_init (GASPI_TEST), GASPI_ERR_INITED);
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, 10000));
  long v = me + 1, sum;
  CHECK (gaspi_allreduce (&v, &sum, 1, GASPI_OP_SUM, GASPI_TYPE_LONG, GASPI_GROUP_ALL, 10000));
  TRUE (sum == (long) n * (n + 1) / 2);
  CHECK (gaspi_segment_create (0, 4096, GASPI_GROUP_ALL, 10000, GASPI_MEM_INITIALIZED));
  CHECK (gaspi_proc_term (10000));
  return 0;
}
