/* GASPI micro-benchmarks for `tiers bench gaspi`: one source, linked once against tiers'
 * libtiers_gaspi and once against GPI-2, run with 2 ranks.
 *
 *   gaspi_bench OUT SCALE
 *
 * Rank 0 writes one line per measurement to the file OUT: `metric bytes value`, where value
 * is microseconds (init: seconds; write_bw: GB/s). SCALE (> 0) multiplies the repetition
 * counts. Metrics:
 *   init        gaspi_proc_init, seconds (rank 0's)
 *   pingpong    write_notify of `bytes`, answered the same way: half a round trip
 *   write_bw    `bytes`-sized writes streamed to rank 1 (batches of 256 + gaspi_wait), until
 *               rank 1 confirms by a notification that the last one arrived
 *   barrier     gaspi_barrier over all ranks
 *   allreduce   gaspi_allreduce of one double (sum)
 *   fetch_add   gaspi_atomic_fetch_add on rank 1's segment, from rank 0 */
#include <GASPI.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEG 0
#define MAX_BYTES (4u << 20)
#define BATCH 256

#define OK(call)                                                                            \
  do {                                                                                      \
    gaspi_return_t r_ = (call);                                                             \
    if (r_ != GASPI_SUCCESS) {                                                              \
      fprintf (stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, (int) r_);    \
      exit (1);                                                                             \
    }                                                                                       \
  } while (0)

static double
now (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static gaspi_rank_t me, n;
static FILE *out;

static void
report (const char *metric, unsigned long bytes, double v)
{
  if (me == 0) {
    fprintf (out, "%s %lu %.6g\n", metric, bytes, v);
    fflush (out);
  }
}

/* Waits for notification `id` and clears it. */
static void
await (gaspi_notification_id_t id)
{
  gaspi_notification_id_t got;
  gaspi_notification_t v;
  OK (gaspi_notify_waitsome (SEG, id, 1, &got, GASPI_BLOCK));
  OK (gaspi_notify_reset (SEG, got, &v));
}

static long
count (double scale, long base, long lo)
{
  long k = (long) (base * scale);
  return k < lo ? lo : k;
}

static void
pingpong (double scale)
{
  const gaspi_rank_t peer = 1 - me;
  for (unsigned long b = 8; b <= MAX_BYTES; b *= 8) {
    long iters = count (scale, (long) ((64ul << 20) / b), 20);
    if (iters > count (scale, 4000, 20))
      iters = count (scale, 4000, 20);
    OK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
    double t = 0;
    for (long i = -5; i < iters; i++) { /* 5 warm-up round trips */
      if (i == 0)
        t = now ();
      if (me == 0) {
        OK (gaspi_write_notify (SEG, 0, peer, SEG, MAX_BYTES, b, 0, 1, 0, GASPI_BLOCK));
        await (0);
      } else {
        await (0);
        OK (gaspi_write_notify (SEG, 0, peer, SEG, MAX_BYTES, b, 0, 1, 0, GASPI_BLOCK));
      }
      OK (gaspi_wait (0, GASPI_BLOCK));
    }
    report ("pingpong", b, (now () - t) / iters / 2 * 1e6);
  }
}

static void
write_bw (double scale)
{
  for (unsigned long b = 4096; b <= MAX_BYTES; b *= 4) {
    long total = count (scale, (long) ((256ul << 20) / b), BATCH);
    OK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
    double t = now ();
    if (me == 0) {
      for (long i = 0; i < total; i++) {
        OK (gaspi_write (SEG, 0, 1, SEG, MAX_BYTES, b, 0, GASPI_BLOCK));
        if ((i + 1) % BATCH == 0)
          OK (gaspi_wait (0, GASPI_BLOCK));
      }
      OK (gaspi_notify (SEG, 1, 1, 1, 0, GASPI_BLOCK));
      OK (gaspi_wait (0, GASPI_BLOCK));
      await (2); /* rank 1 saw the last write's notification */
      report ("write_bw", b, (double) b * total / (now () - t) / 1e9);
    } else if (me == 1) {
      await (1);
      OK (gaspi_notify (SEG, 0, 2, 1, 0, GASPI_BLOCK));
      OK (gaspi_wait (0, GASPI_BLOCK));
    }
  }
}

static void
collectives (double scale)
{
  long iters = count (scale, 4000, 50);
  OK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  double t = now ();
  for (long i = 0; i < iters; i++)
    OK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  report ("barrier", 0, (now () - t) / iters * 1e6);

  double x = me + 1, y = 0;
  OK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  t = now ();
  for (long i = 0; i < iters; i++)
    OK (gaspi_allreduce (&x, &y, 1, GASPI_OP_SUM, GASPI_TYPE_DOUBLE, GASPI_GROUP_ALL,
                         GASPI_BLOCK));
  report ("allreduce", 8, (now () - t) / iters * 1e6);
  if (y != n * (n + 1) / 2.0) {
    fprintf (stderr, "allreduce: %g\n", y);
    exit (1);
  }

  OK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (me == 0) {
    gaspi_atomic_value_t old;
    t = now ();
    for (long i = 0; i < iters; i++)
      OK (gaspi_atomic_fetch_add (SEG, 0, 1, 1, &old, GASPI_BLOCK));
    report ("fetch_add", 8, (now () - t) / iters * 1e6);
  }
  OK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
}

int
main (int argc, char **argv)
{
  if (argc != 3) {
    fprintf (stderr, "usage: %s OUT SCALE\n", argv[0]);
    return 2;
  }
  double scale = atof (argv[2]);
  if (!(scale > 0)) {
    fprintf (stderr, "SCALE must be a positive number\n");
    return 2;
  }
  double t = now ();
  OK (gaspi_proc_init (GASPI_BLOCK));
  t = now () - t;
  OK (gaspi_proc_rank (&me));
  OK (gaspi_proc_num (&n));
  if (n != 2) {
    fprintf (stderr, "run with 2 ranks\n");
    return 2;
  }
  if (me == 0 && !(out = fopen (argv[1], "w"))) {
    perror (argv[1]);
    return 1;
  }
  report ("init", 0, t);
  OK (gaspi_segment_create (SEG, 2 * MAX_BYTES, GASPI_GROUP_ALL, GASPI_BLOCK,
                            GASPI_MEM_INITIALIZED));
  pingpong (scale);
  write_bw (scale);
  collectives (scale);
  OK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  if (me == 0)
    fclose (out);
  OK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
