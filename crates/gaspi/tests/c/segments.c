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
  /* Creating it again, with the same size too, finds the id taken (only a call that timed
   * out may be called again, and find its segment made). */
  EXPECT (gaspi_segment_create (0, big, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED),
          GASPI_ERR_INV_SEG);
  EXPECT (gaspi_segment_use (0, NULL, big, GASPI_GROUP_ALL, GASPI_BLOCK, 0), GASPI_ERR_INV_SEG);

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
  /* Another buffer on a bound id is refused, and so is the same one again. */
  EXPECT (gaspi_segment_use (2, raw, bn, GASPI_GROUP_ALL, GASPI_BLOCK, 0), GASPI_ERR_INV_SEG);
  EXPECT (gaspi_segment_use (2, buf, bn, GASPI_GROUP_ALL, GASPI_BLOCK, 0), GASPI_ERR_INV_SEG);
  /* Memory that is not the program's to bind is refused, before anything is read from it:
   * an unmapped address, a range past the end of its mapping, read-only memory, memory of
   * the library's own (segment 0's notification words), a range that overlaps a segment in
   * part, one that shares a page with a bound segment, and the caller's stack (mapping
   * over it would bring back the bind call's own frames as they were before the copy). */
  int local_int = 0;
  char stackbuf[5000];
  memset (stackbuf, 0x3c, sizeof stackbuf);
  EXPECT (gaspi_segment_bind (3, stackbuf, sizeof stackbuf, 0), GASPI_ERR_MEMALLOC);
  for (size_t i = 0; i < sizeof stackbuf; i++)
    TRUE (stackbuf[i] == 0x3c);
  static const char text[8192] = "read-only";
  char *c0 = (char *) p0;
  EXPECT (gaspi_segment_bind (3, (gaspi_pointer_t) 0x1000, 64, 0), GASPI_ERR_MEMALLOC);
  EXPECT (gaspi_segment_bind (3, &local_int, (gaspi_size_t) 1 << 33, 0), GASPI_ERR_MEMALLOC);
  EXPECT (gaspi_segment_bind (3, (gaspi_pointer_t) text, sizeof text, 0), GASPI_ERR_MEMALLOC);
  EXPECT (gaspi_segment_bind (3, c0 - 4096, 64, 0), GASPI_ERR_MEMALLOC);
  EXPECT (gaspi_segment_bind (3, c0 + big - 16, 64, 0), GASPI_ERR_MEMALLOC);
  EXPECT (gaspi_segment_bind (3, raw, 64, 0), GASPI_ERR_MEMALLOC);
  EXPECT (gaspi_segment_bind (3, raw, 8, 0), GASPI_ERR_MEMALLOC);
  CHECK (gaspi_segment_num (&num));
  TRUE (num == 3 && local_int == 0);

  /* A part of another segment bound again is that segment's bytes (GPI-2's sub-segments):
   * a write into the part shows in the segment, and deleting the part leaves the segment
   * whole, still receiving writes at those bytes. */
  CHECK (gaspi_segment_bind (3, c0 + 4096, 4096, 0));
  gaspi_pointer_t p3;
  CHECK (gaspi_segment_ptr (3, &p3));
  TRUE (p3 == (gaspi_pointer_t) (c0 + 4096));
  CHECK (gaspi_segment_register (3, left, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  src0[2] = 2000 + me;
  CHECK (gaspi_write_notify (0, 8, right, 3, 16, sizeof (int), 0, 1, 0, GASPI_BLOCK));
  CHECK (gaspi_notify_waitsome (3, 0, 1, &id, GASPI_BLOCK));
  CHECK (gaspi_notify_reset (3, id, &val));
  TRUE (((int *) (c0 + 4096))[4] == 2000 + left);
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  /* The segment under a part cannot go first: the part would address freed memory. */
  EXPECT (gaspi_segment_delete (0), GASPI_ERROR);
  CHECK (gaspi_segment_delete (3));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  src0[3] = 3000 + me;
  CHECK (gaspi_write_notify (0, 12, right, 0, 4096 + 20, sizeof (int), 1, 1, 0, GASPI_BLOCK));
  CHECK (gaspi_notify_waitsome (0, 1, 1, &id, GASPI_BLOCK));
  CHECK (gaspi_notify_reset (0, id, &val));
  TRUE (((int *) (c0 + 4096))[5] == 3000 + left);
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  /* Bound memory bound again in part: the same bytes. */
  CHECK (gaspi_segment_bind (3, buf + 2, 8, 0));
  gaspi_pointer_t p3b;
  CHECK (gaspi_segment_ptr (3, &p3b));
  TRUE (p3b == (gaspi_pointer_t) (buf + 2) && *(int *) p3b == me);
  EXPECT (gaspi_segment_delete (2), GASPI_ERROR);
  CHECK (gaspi_segment_delete (3));
  TRUE (buf[2] == me);
  /* A segment bound at a pointer that is not 8-aligned has no word an atomic may use, on
   * this rank as on the others. */
  void *odd_pages = NULL;
  TRUE (posix_memalign (&odd_pages, 4096, 8192) == 0);
  char *odd = (char *) odd_pages + 12;
  CHECK (gaspi_segment_use (4, odd, 128, GASPI_GROUP_ALL, GASPI_BLOCK, 0));
  gaspi_atomic_value_t old;
  for (gaspi_offset_t off = 0; off <= 8; off += 4) {
    EXPECT (gaspi_atomic_fetch_add (4, off, me, 1, &old, GASPI_BLOCK), GASPI_ERR_UNALIGN_OFF);
    EXPECT (gaspi_atomic_fetch_add (4, off, right, 1, &old, GASPI_BLOCK),
            GASPI_ERR_UNALIGN_OFF);
    EXPECT (gaspi_atomic_compare_swap (4, off, me, 0, 1, &old, GASPI_BLOCK),
            GASPI_ERR_UNALIGN_OFF);
  }
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_segment_delete (4));
  free (odd_pages);
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
