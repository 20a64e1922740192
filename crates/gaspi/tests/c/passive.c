/* Passive communication: every rank but 0 sends rank 0 two messages, a short one of its own
 * length and one of gaspi_passive_transfer_size_max bytes (64 KiB - 1 by default, more than
 * one frame of the cluster tier's mailbox); rank 0 receives them all in each sender's order,
 * then times out on an empty mailbox. Then one more of the long ones from each, all arrived
 * before rank 0 looks: each is there at the first GASPI_TEST. */
#include "check.h"

static unsigned char
byte (gaspi_rank_t from, int msg, gaspi_size_t i)
{
  return (unsigned char) (from * 13 + msg * 101 + i + i / 251);
}

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  gaspi_size_t pmax;
  CHECK (gaspi_passive_transfer_size_max (&pmax));
  TRUE (pmax >= 65535);
  CHECK (gaspi_segment_create (0, 2 * pmax, GASPI_GROUP_ALL, GASPI_BLOCK,
                               GASPI_MEM_INITIALIZED));
  unsigned char *s;
  CHECK (gaspi_segment_ptr (0, (gaspi_pointer_t *) &s));
  if (me == 0) {
    int seen[64] = { 0 };
    for (int k = 0; k < 2 * (n - 1); k++) {
      gaspi_rank_t from = n;
      memset (s, 0, pmax);
      CHECK (gaspi_passive_receive (0, 0, &from, pmax, GASPI_BLOCK));
      TRUE (from > 0 && from < n && seen[from] < 2);
      int msg = seen[from]++;
      gaspi_size_t len = msg == 0 ? 100u * from : pmax;
      for (gaspi_size_t i = 0; i < len; i++)
        TRUE (s[i] == byte (from, msg, i));
      if (len < pmax)
        TRUE (s[len] == 0);
    }
    gaspi_rank_t from;
    EXPECT (gaspi_passive_receive (0, 0, &from, pmax, 50), GASPI_TIMEOUT);
    EXPECT (gaspi_passive_receive (0, 0, &from, pmax, GASPI_TEST), GASPI_TIMEOUT);
  } else {
    for (int msg = 0; msg < 2; msg++) {
      gaspi_size_t len = msg == 0 ? 100u * me : pmax;
      for (gaspi_size_t i = 0; i < len; i++)
        s[pmax + i] = byte (me, msg, i);
      CHECK (gaspi_passive_send (0, pmax, 0, len, GASPI_BLOCK));
    }
  }
  EXPECT (gaspi_passive_send (0, 0, 0, pmax + 1, GASPI_BLOCK), GASPI_ERR_INV_COMMSIZE);
  EXPECT (gaspi_passive_send (0, 0, n, 8, GASPI_BLOCK), GASPI_ERR_INV_RANK);
  EXPECT (gaspi_passive_send (0, 2 * pmax - 4, 0, 8, GASPI_BLOCK), GASPI_ERR_INV_LOC_OFF);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));

  /* Messages of several frames that have all arrived (sent before the barrier) are received
   * by the first test, one per call. */
  if (me != 0)
    CHECK (gaspi_passive_send (0, pmax, 0, pmax, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (me == 0) {
    for (int k = 0; k < n - 1; k++) {
      gaspi_rank_t from = n;
      CHECK (gaspi_passive_receive (0, 0, &from, pmax, GASPI_TEST));
      TRUE (from > 0 && from < n);
      for (gaspi_size_t i = 0; i < pmax; i++)
        TRUE (s[i] == byte (from, 1, i));
    }
    gaspi_rank_t from;
    EXPECT (gaspi_passive_receive (0, 0, &from, pmax, GASPI_TEST), GASPI_TIMEOUT);
  }
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
