/* Writes into a rank that only spins on its own memory: ranks 0 and 1 ping-pong writes,
 * each waiting for the other's by reading the last byte of the range it receives, calling
 * nothing meanwhile (as GPI-2's write_lat does). The write must land all the same, as it
 * does on RDMA: on engines where writes travel as messages the library's watcher thread
 * applies them. Every payload is checked byte by byte, from 8 bytes to 1 MiB. */
#include "check.h"
#include <time.h>

#define ROUNDS 20
#define MAX (1 << 20)

static unsigned char
pattern (int bytes, int round, int from, int i)
{
  return (unsigned char) (bytes * 13 + round * 7 + from * 101 + i);
}

static int
arrived (volatile const unsigned char *p, int bytes, int round, int from)
{
  for (int i = 0; i < bytes - 1; i++)
    if (p[i] != pattern (bytes, round, from, i))
      return 0;
  return 1;
}

static double
now (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  /* [0, MAX): what this rank sends; [MAX, 2 MAX): what it receives. */
  CHECK (gaspi_segment_create (0, 2 * MAX, GASPI_GROUP_ALL, GASPI_BLOCK,
                               GASPI_MEM_INITIALIZED));
  unsigned char *s;
  CHECK (gaspi_segment_ptr (0, (gaspi_pointer_t *) &s));
  const int pair = me < 2 && n >= 2;
  const gaspi_rank_t peer = me ^ 1;
  for (int bytes = 8; bytes <= MAX; bytes *= 8) {
    /* The last byte of a round's payload is never the previous round's, nor zero. */
    volatile unsigned char *last = s + MAX + bytes - 1;
    CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
    if (pair) {
      for (int r = 0; r < ROUNDS; r++) {
        const int receive_first = me == 1;
        for (int step = 0; step < 2; step++) {
          if ((step == 0) == receive_first) {
            const unsigned char want = (unsigned char) (1 + r % 250);
            while (*last != want) {
            }
            /* One copy's stores may become visible out of order (x86's fast string
             * copies): the rest of the payload gets a second to settle, not more. */
            double t0 = now ();
            while (!arrived (s + MAX, bytes, r, peer))
              TRUE (now () - t0 < 1.0);
          } else {
            for (int i = 0; i < bytes - 1; i++)
              s[i] = pattern (bytes, r, me, i);
            s[bytes - 1] = (unsigned char) (1 + r % 250);
            CHECK (gaspi_write (0, 0, peer, 0, MAX, bytes, 0, GASPI_BLOCK));
            CHECK (gaspi_wait (0, GASPI_BLOCK));
          }
        }
      }
    }
    CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  }
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
