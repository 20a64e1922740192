/* Atomics: fetch_add from every rank onto one word, compare_swap with one winner, and the
 * checks of alignment and range. */
#include "check.h"

#define ADDS 1000

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  CHECK (gaspi_segment_create (0, 64, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));
  gaspi_atomic_value_t *w;
  CHECK (gaspi_segment_ptr (0, (gaspi_pointer_t *) &w));

  /* Every rank adds 1 ADDS times at rank 0 and rank + 1 once at the last rank. */
  gaspi_atomic_value_t old;
  for (int i = 0; i < ADDS; i++) {
    CHECK (gaspi_atomic_fetch_add (0, 0, 0, 1, &old, GASPI_BLOCK));
    TRUE (old < (gaspi_atomic_value_t) n * ADDS);
  }
  CHECK (gaspi_atomic_fetch_add (0, 8, n - 1, me + 1, &old, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (me == 0)
    TRUE (w[0] == (gaspi_atomic_value_t) n * ADDS);
  if (me == n - 1)
    TRUE (w[1] == (gaspi_atomic_value_t) n * (n + 1) / 2);

  /* compare_swap 0 -> me + 1 on rank 0's word 2: exactly one rank wins. */
  CHECK (gaspi_atomic_compare_swap (0, 16, 0, 0, me + 1, &old, GASPI_BLOCK));
  unsigned long won = old == 0, winners;
  CHECK (gaspi_allreduce (&won, &winners, 1, GASPI_OP_SUM, GASPI_TYPE_ULONG, GASPI_GROUP_ALL,
                          GASPI_BLOCK));
  TRUE (winners == 1);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (me == 0)
    TRUE (w[2] >= 1 && w[2] <= n);
  /* A failed compare leaves the value and returns it. */
  CHECK (gaspi_atomic_compare_swap (0, 16, 0, 12345, 7, &old, GASPI_BLOCK));
  TRUE (old >= 1 && old <= n);

  EXPECT (gaspi_atomic_fetch_add (0, 4, 0, 1, &old, GASPI_BLOCK), GASPI_ERR_UNALIGN_OFF);
  EXPECT (gaspi_atomic_fetch_add (0, 64, 0, 1, &old, GASPI_BLOCK), GASPI_ERR_INV_REM_OFF);
  EXPECT (gaspi_atomic_fetch_add (0, 0, n, 1, &old, GASPI_BLOCK), GASPI_ERR_INV_RANK);
  EXPECT (gaspi_atomic_fetch_add (1, 0, 0, 1, &old, GASPI_BLOCK), GASPI_ERR_INV_SEG);
  gaspi_atomic_value_t amax;
  CHECK (gaspi_atomic_max (&amax));
  TRUE (amax > 0);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
