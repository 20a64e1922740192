/* Error paths: calls before init, bad ranks, segments, offsets, queues and notifications
 * return their GASPI codes; waits with a timeout return GASPI_TIMEOUT and can be resumed. */
#include "check.h"
#include <stdint.h>

int
main (void)
{
  gaspi_rank_t me, n;
  EXPECT (gaspi_proc_rank (&me), GASPI_ERR_NOINIT);
  EXPECT (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK), GASPI_ERR_NOINIT);
  gaspi_number_t inited = 1;
  CHECK (gaspi_initialized (&inited));
  TRUE (inited == 0);
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  EXPECT (gaspi_proc_init (GASPI_BLOCK), GASPI_ERR_INITED);
  CHECK (gaspi_initialized (&inited));
  TRUE (inited == 1);
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  EXPECT (gaspi_proc_rank (NULL), GASPI_ERR_NULLPTR);
  const gaspi_rank_t right = (me + 1) % n;
  const gaspi_size_t size = 4096;
  CHECK (gaspi_segment_create (0, size, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));

  /* Bad arguments of a write. */
  EXPECT (gaspi_write (0, 0, n, 0, 0, 8, 0, GASPI_BLOCK), GASPI_ERR_INV_RANK);
  EXPECT (gaspi_write (0, 0, 65535, 0, 0, 8, 0, GASPI_BLOCK), GASPI_ERR_INV_RANK);
  EXPECT (gaspi_write (0, size - 4, right, 0, 0, 8, 0, GASPI_BLOCK), GASPI_ERR_INV_LOC_OFF);
  EXPECT (gaspi_write (0, 0, right, 0, size - 4, 8, 0, GASPI_BLOCK), GASPI_ERR_INV_REM_OFF);
  EXPECT (gaspi_write (0, 0, right, 0, ~(gaspi_offset_t) 0, 8, 0, GASPI_BLOCK),
          GASPI_ERR_INV_REM_OFF);
  EXPECT (gaspi_write (3, 0, right, 0, 0, 8, 0, GASPI_BLOCK), GASPI_ERR_INV_SEG);
  EXPECT (gaspi_write (0, 0, right, 3, 0, 8, 0, GASPI_BLOCK), GASPI_ERR_INV_SEG);
  EXPECT (gaspi_write (0, 0, right, 0, 0, 8, 200, GASPI_BLOCK), GASPI_ERR_INV_QUEUE);
  EXPECT (gaspi_read (0, size, right, 0, 0, 1, 0, GASPI_BLOCK), GASPI_ERR_INV_LOC_OFF);
  gaspi_number_t nnum;
  CHECK (gaspi_notification_num (&nnum));
  EXPECT (gaspi_notify (0, right, nnum, 1, 0, GASPI_BLOCK), GASPI_ERR_INV_NOTIF_ID);
  EXPECT (gaspi_notify (0, right, 0, 0, 0, GASPI_BLOCK), GASPI_ERR_INV_NOTIF_VAL);
  gaspi_notification_id_t id;
  EXPECT (gaspi_notify_waitsome (0, nnum - 1, 2, &id, GASPI_BLOCK), GASPI_ERR_INV_NOTIF_ID);
  EXPECT (gaspi_segment_alloc (255, 64, GASPI_MEM_INITIALIZED), GASPI_ERR_INV_SEG);
  EXPECT (gaspi_segment_alloc (5, 0, GASPI_MEM_INITIALIZED), GASPI_ERR_INV_SEGSIZE);
  /* Sizes up to SIZE_MAX are refused as any size the heap cannot hold is, rounding to pages
   * included; nothing is left allocated that could be addressed. */
  const gaspi_size_t huge[] = { (gaspi_size_t) 1 << 40, SIZE_MAX, SIZE_MAX - 100,
                                SIZE_MAX - 4094, SIZE_MAX - 4095, SIZE_MAX - 8192 };
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    EXPECT (gaspi_segment_alloc (1, huge[i], GASPI_MEM_INITIALIZED), GASPI_ERR_MEMALLOC);
    EXPECT (gaspi_segment_create (1, huge[i], GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED),
            GASPI_ERR_MEMALLOC);
  }
  gaspi_atomic_value_t oldv;
  EXPECT (gaspi_atomic_fetch_add (1, (gaspi_offset_t) 1 << 40, me, 1, &oldv, 1000),
          GASPI_ERR_INV_SEG);
  /* A bind names a valid, free segment id first, on every engine. */
  static char bindable[4096];
  EXPECT (gaspi_segment_bind (255, bindable, 64, 0), GASPI_ERR_INV_SEG);
  EXPECT (gaspi_segment_bind (0, bindable, 64, 0), GASPI_ERR_INV_SEG);
  EXPECT (gaspi_numa_socket (NULL), GASPI_ERR_NULLPTR);
  EXPECT (gaspi_barrier (17, GASPI_BLOCK), GASPI_ERR_INV_GROUP);
  EXPECT (gaspi_proc_kill (me, GASPI_BLOCK), GASPI_ERR_INV_RANK);
  TRUE (gaspi_error_str (GASPI_TIMEOUT) != NULL && gaspi_error_str (12345) != NULL);
  gaspi_string_t msg = NULL;
  CHECK (gaspi_print_error (GASPI_QUEUE_FULL, &msg));
  TRUE (msg != NULL && strlen (msg) > 0);
  free (msg);

  /* Timeouts: nothing arrives, so waiting 20 ms or testing once times out. */
  EXPECT (gaspi_notify_waitsome (0, 0, 16, &id, 20), GASPI_TIMEOUT);
  EXPECT (gaspi_notify_waitsome (0, 0, 16, &id, GASPI_TEST), GASPI_TIMEOUT);
  gaspi_rank_t from;
  EXPECT (gaspi_passive_receive (0, 0, &from, 64, 20), GASPI_TIMEOUT);

  /* A barrier that rank 0 enters alone times out there (unless it is the only rank); the
   * others enter it only after rank 0's notification, and rank 0 resumes the same barrier. */
  if (n == 1) {
    CHECK (gaspi_barrier (GASPI_GROUP_ALL, 50));
  } else if (me == 0) {
    EXPECT (gaspi_barrier (GASPI_GROUP_ALL, 50), GASPI_TIMEOUT);
    /* Another collective while the barrier is to be resumed. */
    int one = 1, sum;
    EXPECT (gaspi_allreduce (&one, &sum, 1, GASPI_OP_SUM, GASPI_TYPE_INT, GASPI_GROUP_ALL, 50),
            GASPI_ERR_ACTIVE_COLL);
    for (gaspi_rank_t r = 1; r < n; r++)
      CHECK (gaspi_notify (0, r, 1, 1, 0, GASPI_BLOCK));
    CHECK (gaspi_wait (0, GASPI_BLOCK));
    gaspi_return_t r;
    while ((r = gaspi_barrier (GASPI_GROUP_ALL, 10)) == GASPI_TIMEOUT)
      ;
    CHECK (r);
  } else {
    gaspi_notification_t v;
    CHECK (gaspi_notify_waitsome (0, 1, 1, &id, GASPI_BLOCK));
    CHECK (gaspi_notify_reset (0, 1, &v));
    CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  }

  /* A segment deleted and allocated again is not the peers' to address until it is
   * registered with them again: the left neighbour's stale registration is refused. */
  CHECK (gaspi_segment_alloc (2, 4096, GASPI_MEM_INITIALIZED));
  CHECK (gaspi_segment_register (2, right, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  const gaspi_rank_t left = (me + n - 1) % n;
  CHECK (gaspi_write (0, 0, left, 2, 0, 8, 0, GASPI_BLOCK));
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_segment_delete (2));
  CHECK (gaspi_segment_alloc (2, 4096, GASPI_MEM_INITIALIZED));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (n > 1)
    EXPECT (gaspi_write (0, 0, left, 2, 0, 8, 0, GASPI_BLOCK), GASPI_ERR_INV_SEG);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_segment_register (2, right, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_write (0, 0, left, 2, 0, 8, 0, GASPI_BLOCK));
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));

  /* Every rank is healthy. */
  gaspi_state_t states[64];
  CHECK (gaspi_state_vec_get (states));
  for (gaspi_rank_t r = 0; r < n; r++)
    TRUE (states[r] == GASPI_STATE_HEALTHY);

  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  EXPECT (gaspi_proc_term (GASPI_BLOCK), GASPI_ERR_NOINIT);
  return 0;
}
