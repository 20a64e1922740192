/* Segments: create, alloc + per-peer register, bind/use of malloc'ed memory, list, size,
 * delete; a segment a peer did not register with this rank cannot be addressed. */
#include "check.h"

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  const gaspi_rank_t right = (me + 1) % n, left = (me + n - 1) % n;
  gaspi_number_t num;
  CHECK (gaspi_segment_num (&num));
  TRUE (num == 0);

  /* Collective creation: every rank knows every rank's segment 0. */
  const gaspi_size_t big = 1 << 20;
  CHECK (gaspi_segment_create (0, big, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));
  gaspi_pointer_t p0;
  CHECK (gaspi_segment_ptr (0, &p0));
  TRUE (p0 != NULL);
  for (gaspi_rank_t r = 0; r < n; r++) {
    gaspi_size_t s = 0;
    CHECK (gaspi_segment_size (0, r, &s));
    TRUE (s == big);
  }
  EXPECT (gaspi_segment_alloc (0, 4096, GASPI_MEM_UNINITIALIZED), GASPI_ERR_INV_SEG);

  /* Per-peer registration: segment 1 is made known to the right neighbour only, so the
   * left neighbour's segment 1 is the one this rank may write to. */
  CHECK (gaspi_segment_alloc (1, 4096, GASPI_MEM_INITIALIZED));
  CHECK (gaspi_segment_register (1, right, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  int *p1;
  CHECK (gaspi_segment_ptr (1, (gaspi_pointer_t *) &p1));
  int *src0 = (int *) p0;
  src0[0] = 1000 + me;
  CHECK (gaspi_write_notify (0, 0, left, 1, 0, sizeof (int), 0, 1, 0, GASPI_BLOCK));
  if (n > 2)
    EXPECT (gaspi_write (0, 0, right, 1, 0, sizeof (int), 0, GASPI_BLOCK), GASPI_ERR_INV_SEG);
  gaspi_notification_id_t id;
  gaspi_notification_t val;
  CHECK (gaspi_notify_waitsome (1, 0, 1, &id, GASPI_BLOCK));
  CHECK (gaspi_notify_reset (1, id, &val));
  TRUE (val == 1 && p1[0] == 1000 + right);
  CHECK (gaspi_wait (0, GASPI_BLOCK));

  /* Bound memory at no particular alignment: the program's own bytes are the segment. */
  const gaspi_size_t bn = 1000;
  char *raw = malloc (bn + 64);
  TRUE (raw != NULL);
  int *buf = (int *) (raw + 8);
  for (gaspi_size_t i = 0; i < bn / sizeof (int); i++)
    buf[i] = me;
  CHECK (gaspi_segment_use (2, buf, bn, GASPI_GROUP_ALL, GASPI_BLOCK, 0));
  gaspi_pointer_t p2;
  CHECK (gaspi_segment_ptr (2, &p2));
  TRUE (p2 == (gaspi_pointer_t) buf);
  /* Another buffer on a bound id is refused. */
  EXPECT (gaspi_segment_use (2, raw, bn, GASPI_GROUP_ALL, GASPI_BLOCK, 0), GASPI_ERR_INV_SEG);
  /* Write the right neighbour's bound bytes 4..8 with this rank's number + 100. */
  src0[1] = me + 100;
  CHECK (gaspi_write_notify (0, 4, right, 2, 4, sizeof (int), 7, 1, 0, GASPI_BLOCK));
  CHECK (gaspi_notify_waitsome (2, 7, 1, &id, GASPI_BLOCK));
  CHECK (gaspi_notify_reset (2, id, &val));
  TRUE (buf[1] == left + 100 && buf[0] == me && buf[2] == me);
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));

  gaspi_segment_id_t ids[8];
  CHECK (gaspi_segment_num (&num));
  TRUE (num == 3);
  EXPECT (gaspi_segment_list (2, ids), GASPI_ERR_INV_NUM);
  CHECK (gaspi_segment_list (num, ids));
  TRUE (ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
  gaspi_segment_id_t avail;
  CHECK (gaspi_segment_avail_local (&avail));
  TRUE (avail == 3);

  /* Deleting the bound segment leaves the program's memory with its bytes. */
  CHECK (gaspi_segment_delete (2));
  TRUE (buf[0] == me && buf[1] == left + 100);
  buf[3] = 42;
  TRUE (buf[3] == 42);
  free (raw);
  CHECK (gaspi_segment_delete (1));
  EXPECT (gaspi_segment_delete (1), GASPI_ERR_INV_SEG);
  CHECK (gaspi_segment_delete (0));
  CHECK (gaspi_segment_num (&num));
  TRUE (num == 0);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
