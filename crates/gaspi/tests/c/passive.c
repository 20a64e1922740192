/* Passive communication: every rank but 0 sends rank 0 a message of its own length and
 * bytes; rank 0 receives them all, then times out on an empty mailbox. */
#include "check.h"

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  gaspi_size_t pmax;
  CHECK (gaspi_passive_transfer_size_max (&pmax));
  TRUE (pmax >= 4096);
  CHECK (gaspi_segment_create (0, 2 * pmax, GASPI_GROUP_ALL, GASPI_BLOCK,
                               GASPI_MEM_INITIALIZED));
  unsigned char *s;
  CHECK (gaspi_segment_ptr (0, (gaspi_pointer_t *) &s));
  if (me == 0) {
    int seen[64] = { 0 };
    for (int k = 1; k < n; k++) {
      gaspi_rank_t from = n;
      memset (s, 0, pmax);
      CHECK (gaspi_passive_receive (0, 0, &from, pmax, GASPI_BLOCK));
      TRUE (from > 0 && from < n && !seen[from]);
      seen[from] = 1;
      for (gaspi_size_t i = 0; i < 100u * from; i++)
        TRUE (s[i] == (unsigned char) (from + i));
    }
    gaspi_rank_t from;
    EXPECT (gaspi_passive_receive (0, 0, &from, pmax, 50), GASPI_TIMEOUT);
    EXPECT (gaspi_passive_receive (0, 0, &from, pmax, GASPI_TEST), GASPI_TIMEOUT);
  } else {
    for (gaspi_size_t i = 0; i < 100u * me; i++)
      s[pmax + i] = (unsigned char) (me + i);
    CHECK (gaspi_passive_send (0, pmax, 0, 100 * me, GASPI_BLOCK));
  }
  EXPECT (gaspi_passive_send (0, 0, 0, pmax + 1, GASPI_BLOCK), GASPI_ERR_INV_COMMSIZE);
  EXPECT (gaspi_passive_send (0, 0, n, 8, GASPI_BLOCK), GASPI_ERR_INV_RANK);
  EXPECT (gaspi_passive_send (0, 2 * pmax - 4, 0, 8, GASPI_BLOCK), GASPI_ERR_INV_LOC_OFF);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
