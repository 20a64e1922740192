/* A program whose ranks all return from main without gaspi_proc_term, after a notified write
 * each way: the library's watcher is still running when the process exits. Every rank must
 * exit 0. Under mpirun with every rank talking through MPI the exit used to crash (SIGSEGV:
 * the watcher called MPI while the exit finalised it). */
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
  CHECK (gaspi_segment_create (0, 4096, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));
  gaspi_pointer_t p;
  CHECK (gaspi_segment_ptr (0, &p));
  unsigned char *mem = p;
  mem[0] = (unsigned char) (me + 1);
  const gaspi_rank_t next = (gaspi_rank_t) ((me + 1) % n);
  const gaspi_rank_t prev = (gaspi_rank_t) ((me + n - 1) % n);
  CHECK (gaspi_write_notify (0, 0, next, 0, 64, 1, 0, 1, 0, GASPI_BLOCK));
  gaspi_notification_id_t got;
  CHECK (gaspi_notify_waitsome (0, 0, 1, &got, GASPI_BLOCK));
  gaspi_notification_t v;
  CHECK (gaspi_notify_reset (0, got, &v));
  TRUE (v == 1);
  TRUE (mem[64] == (unsigned char) (prev + 1));
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  printf ("rank %d: exits without gaspi_proc_term\n", (int) me);
  return 0;
}
