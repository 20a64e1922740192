/* Statistics counters: nothing counted before the verbosity level asks, then writes, bytes
 * and notifications by target rank, waits and collectives in total; info, get and reset, and
 * their errors. */
#include "check.h"

static unsigned long
get (gaspi_statistic_counter_t c, gaspi_number_t arg)
{
  unsigned long v = 12345;
  CHECK (gaspi_statistic_counter_get (c, arg, &v));
  return v;
}

/* The number of the counter called `name`. */
static gaspi_statistic_counter_t
find (const char *name, gaspi_statistic_argument_t want)
{
  gaspi_number_t max;
  CHECK (gaspi_statistic_counter_max (&max));
  for (gaspi_statistic_counter_t c = 0; c < max; c++) {
    gaspi_statistic_argument_t arg;
    gaspi_string_t n, d;
    gaspi_number_t level;
    CHECK (gaspi_statistic_counter_info (c, &arg, &n, &d, &level));
    TRUE (strlen (d) > 0 && level >= 1);
    if (strcmp (n, name) == 0) {
      TRUE (arg == want);
      return c;
    }
  }
  fprintf (stderr, "no counter %s\n", name);
  exit (1);
}

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  gaspi_rank_t to = (me + 1) % n;
  CHECK (gaspi_segment_create (0, 4096, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));

  gaspi_statistic_counter_t writes = find ("writes", GASPI_STATISTIC_ARGUMENT_RANK);
  gaspi_statistic_counter_t bytes = find ("bytes written", GASPI_STATISTIC_ARGUMENT_RANK);
  gaspi_statistic_counter_t notes = find ("notifications", GASPI_STATISTIC_ARGUMENT_RANK);
  gaspi_statistic_counter_t waits = find ("waits", GASPI_STATISTIC_ARGUMENT_NONE);
  gaspi_statistic_counter_t barriers = find ("barriers", GASPI_STATISTIC_ARGUMENT_NONE);
  gaspi_statistic_counter_t allreduces = find ("allreduces", GASPI_STATISTIC_ARGUMENT_NONE);

  /* Level 0 (the default): nothing is counted. */
  CHECK (gaspi_write (0, 0, to, 0, 1024, 100, 0, GASPI_BLOCK));
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  TRUE (get (writes, to) == 0 && get (waits, 0) == 0);

  CHECK (gaspi_statistic_verbosity_level (1));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  for (int i = 0; i < 3; i++)
    CHECK (gaspi_write (0, 0, to, 0, 1024 + 100 * i, 100, 0, GASPI_BLOCK));
  CHECK (gaspi_write_notify (0, 0, to, 0, 2048, 64, 7, 1, 0, GASPI_BLOCK));
  CHECK (gaspi_wait (0, GASPI_BLOCK));
  double x = 1.0, y = 0.0;
  CHECK (gaspi_allreduce (&x, &y, 1, GASPI_OP_SUM, GASPI_TYPE_DOUBLE, GASPI_GROUP_ALL,
                          GASPI_BLOCK));
  TRUE (y == (double) n);

  TRUE (get (writes, to) == 4);
  TRUE (get (bytes, to) == 3 * 100 + 64);
  TRUE (get (notes, to) == 1);
  if (n > 1)
    TRUE (get (writes, me) == 0);
  TRUE (get (waits, 0) == 1);
  TRUE (get (barriers, 0) == 1);
  TRUE (get (allreduces, 0) == 1);

  CHECK (gaspi_statistic_counter_reset (writes));
  TRUE (get (writes, to) == 0 && get (bytes, to) == 364);

  unsigned long v;
  gaspi_number_t max;
  CHECK (gaspi_statistic_counter_max (&max));
  EXPECT (gaspi_statistic_counter_get (writes, n, &v), GASPI_ERR_INV_RANK);
  EXPECT (gaspi_statistic_counter_get (max, 0, &v), GASPI_ERR_INV_NUM);
  EXPECT (gaspi_statistic_counter_reset (max), GASPI_ERR_INV_NUM);
  EXPECT (gaspi_statistic_counter_get (writes, 0, NULL), GASPI_ERR_NULLPTR);

  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
