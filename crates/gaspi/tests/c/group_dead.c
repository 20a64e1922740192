/* A group's collectives when a member is gone: the last rank of two or more exits (without
 * gaspi_proc_term) while the others wait in an allreduce over a group of every rank. That
 * allreduce, the group's next barrier and the commit of a new group that names the gone rank
 * return GASPI_ERROR instead of waiting for it; a group of the ranks left keeps working.
 * Under mpirun, which ends the whole job when a rank ends without MPI_Finalize, and on one
 * rank, the group's collectives are only checked to work. */
#include "check.h"
#include <unistd.h>

int
main (void)
{
  alarm (60);
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  gaspi_group_t all;
  CHECK (gaspi_group_create (&all));
  for (gaspi_rank_t r = 0; r < n; r++)
    CHECK (gaspi_group_add (all, r));
  CHECK (gaspi_group_commit (all, GASPI_BLOCK));
  CHECK (gaspi_barrier (all, GASPI_BLOCK));
  long one = 1, sum = 0;
  CHECK (gaspi_allreduce (&one, &sum, 1, GASPI_OP_SUM, GASPI_TYPE_LONG, all, GASPI_BLOCK));
  TRUE (sum == n);
  const int mpirun = getenv ("OMPI_COMM_WORLD_SIZE") != NULL || getenv ("PMI_SIZE") != NULL;
  if (n < 2 || mpirun) {
    CHECK (gaspi_proc_term (GASPI_BLOCK));
    return 0;
  }
  const gaspi_rank_t leaver = n - 1;
  if (me == leaver) {
    /* Gone while the others wait for its contribution. */
    usleep (200000);
    _exit (0);
  }
  EXPECT (gaspi_allreduce (&one, &sum, 1, GASPI_OP_SUM, GASPI_TYPE_LONG, all, GASPI_BLOCK),
          GASPI_ERROR);
  EXPECT (gaspi_barrier (all, GASPI_BLOCK), GASPI_ERROR);
  gaspi_state_t st[256];
  CHECK (gaspi_state_vec_get (st));
  TRUE (st[leaver] == GASPI_STATE_CORRUPT);
  gaspi_group_t with;
  CHECK (gaspi_group_create (&with));
  for (gaspi_rank_t r = 0; r < n; r++)
    CHECK (gaspi_group_add (with, r));
  EXPECT (gaspi_group_commit (with, GASPI_BLOCK), GASPI_ERROR);
  gaspi_group_t left;
  CHECK (gaspi_group_create (&left));
  for (gaspi_rank_t r = 0; r < leaver; r++)
    CHECK (gaspi_group_add (left, r));
  CHECK (gaspi_group_commit (left, GASPI_BLOCK));
  CHECK (gaspi_barrier (left, GASPI_BLOCK));
  CHECK (gaspi_allreduce (&one, &sum, 1, GASPI_OP_SUM, GASPI_TYPE_LONG, left, GASPI_BLOCK));
  TRUE (sum == leaver);
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
