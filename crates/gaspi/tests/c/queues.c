/* Queues: a configured queue_size_max, GASPI_QUEUE_FULL, wait, purge, create and delete up
 * to gaspi_queue_max. */
#include "check.h"

int
main (void)
{
  gaspi_config_t cfg;
  CHECK (gaspi_config_get (&cfg));
  cfg.queue_size_max = 8;
  CHECK (gaspi_config_set (cfg));
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  EXPECT (gaspi_config_set (cfg), GASPI_ERROR);
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  const gaspi_rank_t right = (me + 1) % n;
  CHECK (gaspi_segment_create (0, 1 << 16, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));

  gaspi_number_t num, qmax, qsize, size;
  CHECK (gaspi_queue_num (&num));
  CHECK (gaspi_queue_max (&qmax));
  CHECK (gaspi_queue_size_max (&qsize));
  TRUE (num == cfg.queue_num && qmax >= num && qsize == 8);

  gaspi_queue_id_t q;
  CHECK (gaspi_queue_create (&q, GASPI_BLOCK));
  TRUE (q == num);
  CHECK (gaspi_queue_num (&num));
  TRUE (num == cfg.queue_num + 1);

  /* Fill the new queue: 7 writes and a write_notify are 8 requests; the 9th is refused. */
  for (int i = 0; i < 7; i++)
    CHECK (gaspi_write (0, 0, right, 0, 64 * (i + 1), 64, q, GASPI_BLOCK));
  CHECK (gaspi_write_notify (0, 0, right, 0, 0, 64, 0, 1, q, GASPI_BLOCK));
  CHECK (gaspi_queue_size (q, &size));
  TRUE (size == 8);
  EXPECT (gaspi_write (0, 0, right, 0, 0, 64, q, GASPI_BLOCK), GASPI_QUEUE_FULL);
  EXPECT (gaspi_notify (0, right, 1, 1, q, GASPI_BLOCK), GASPI_QUEUE_FULL);
  CHECK (gaspi_queue_size (q, &size));
  TRUE (size == 8);
  EXPECT (gaspi_queue_delete (q), GASPI_ERROR); /* requests are still posted */
  CHECK (gaspi_wait (q, GASPI_BLOCK));
  CHECK (gaspi_queue_size (q, &size));
  TRUE (size == 0);

  /* Purge leaves the queue empty and usable. */
  for (int i = 0; i < 3; i++)
    CHECK (gaspi_write (0, 0, right, 0, 0, 64, q, GASPI_BLOCK));
  CHECK (gaspi_queue_purge (q, GASPI_BLOCK));
  CHECK (gaspi_queue_size (q, &size));
  TRUE (size == 0);
  CHECK (gaspi_write (0, 0, right, 0, 0, 64, q, GASPI_BLOCK));
  CHECK (gaspi_wait (q, GASPI_BLOCK));

  CHECK (gaspi_queue_delete (q));
  EXPECT (gaspi_write (0, 0, right, 0, 0, 64, q, GASPI_BLOCK), GASPI_ERR_INV_QUEUE);
  EXPECT (gaspi_wait (q, GASPI_BLOCK), GASPI_ERR_INV_QUEUE);
  EXPECT (gaspi_queue_delete (q), GASPI_ERR_INV_QUEUE);

  /* Create until the maximum, then one more is refused; delete them all again. */
  gaspi_queue_id_t made[256];
  int k = 0;
  while (gaspi_queue_create (&made[k], GASPI_BLOCK) == GASPI_SUCCESS)
    k++;
  CHECK (gaspi_queue_num (&num));
  TRUE (num == qmax && k == (int) (qmax - cfg.queue_num));
  for (int i = 0; i < k; i++)
    CHECK (gaspi_queue_delete (made[i]));
  CHECK (gaspi_queue_num (&num));
  TRUE (num == cfg.queue_num);

  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
