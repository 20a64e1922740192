/* One-sided communication with notifications: write_notify from every rank to every rank,
 * notify_waitsome + notify_reset, write_list_notify, read and read_notify. */
#include "check.h"

#define BLOCK 4096

static void
fill (unsigned char *p, gaspi_rank_t from, gaspi_rank_t to)
{
  for (int i = 0; i < BLOCK; i++)
    p[i] = (unsigned char) (from * 31 + to * 7 + i);
}

static int
same (const unsigned char *p, gaspi_rank_t from, gaspi_rank_t to)
{
  for (int i = 0; i < BLOCK; i++)
    if (p[i] != (unsigned char) (from * 31 + to * 7 + i))
      return 0;
  return 1;
}

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  const gaspi_rank_t right = (me + 1) % n, left = (me + n - 1) % n;
  /* Layout: [0, n) receive blocks, [n, 2n) send blocks, then list and read areas. */
  const gaspi_size_t size = (gaspi_size_t) (4 * n + 8) * BLOCK;
  CHECK (gaspi_segment_create (0, size, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));
  unsigned char *s;
  CHECK (gaspi_segment_ptr (0, (gaspi_pointer_t *) &s));

  /* Every rank writes block `me` of every other rank, notification `me` = me + 1. */
  for (gaspi_rank_t r = 0; r < n; r++) {
    if (r == me)
      continue;
    fill (s + (n + r) * BLOCK, me, r);
    CHECK (gaspi_write_notify (0, (n + r) * BLOCK, r, 0, me * BLOCK, BLOCK, me, me + 1, 0,
                               GASPI_BLOCK));
  }
  for (int k = 0; k < n - 1; k++) {
    gaspi_notification_id_t id;
    gaspi_notification_t v;
    CHECK (gaspi_notify_waitsome (0, 0, n, &id, GASPI_BLOCK));
    CHECK (gaspi_notify_reset (0, id, &v));
    TRUE (id < n && id != me && v == id + 1u);
    TRUE (same (s + id * BLOCK, id, me));
  }
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));

  /* A list of three pieces to the right neighbour, with one notification after them. */
  const gaspi_offset_t la = (gaspi_offset_t) 2 * n * BLOCK;
  for (int i = 0; i < 3 * BLOCK; i++)
    s[la + i] = (unsigned char) (me + i / BLOCK);
  gaspi_segment_id_t ls[3] = { 0, 0, 0 }, rs[3] = { 0, 0, 0 };
  gaspi_offset_t lo[3], ro[3];
  gaspi_size_t sz[3] = { BLOCK, BLOCK, 100 };
  for (int i = 0; i < 3; i++) {
    lo[i] = la + (gaspi_offset_t) i * BLOCK;
    ro[i] = la + (gaspi_offset_t) (3 + i) * BLOCK; /* pieces land after the sender's own */
  }
  CHECK (gaspi_write_list_notify (3, ls, lo, right, rs, ro, sz, 0, 1000, 5, 1, GASPI_BLOCK));
  gaspi_notification_id_t id;
  gaspi_notification_t v;
  CHECK (gaspi_notify_waitsome (0, 1000, 1, &id, GASPI_BLOCK));
  CHECK (gaspi_notify_reset (0, id, &v));
  TRUE (id == 1000 && v == 5);
  for (int i = 0; i < 2 * BLOCK + 100; i++)
    TRUE (s[la + 3 * BLOCK + i] == (unsigned char) (left + i / BLOCK));
  TRUE (s[la + 5 * BLOCK + 100] == 0);
  CHECK (gaspi_wait (1, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));

  /* Read the left neighbour's send block for this rank (written above), then read it again
   * with a notification that says the data is here. */
  const gaspi_offset_t ra = (gaspi_offset_t) (2 * n + 6) * BLOCK;
  fill (s + (n + me) * BLOCK, 99, me); /* a block of this rank's own for the neighbour to read */
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_read (0, ra, left, 0, (n + left) * BLOCK, BLOCK, 2, GASPI_BLOCK));
  CHECK (gaspi_wait (2, GASPI_BLOCK));
  TRUE (same (s + ra, 99, left));
  memset (s + ra, 0, BLOCK);
  CHECK (gaspi_read_notify (0, ra, left, 0, (n + left) * BLOCK, BLOCK, 2000, 2, GASPI_BLOCK));
  CHECK (gaspi_notify_waitsome (0, 2000, 1, &id, GASPI_BLOCK));
  CHECK (gaspi_notify_reset (0, id, &v));
  TRUE (id == 2000 && v != 0);
  TRUE (same (s + ra, 99, left));
  CHECK (gaspi_wait (2, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
