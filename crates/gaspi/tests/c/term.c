/* gaspi_proc_term while other threads wait in the library, as GASPI programs leave them: a
 * detached thread serving passive messages, blocked in gaspi_passive_receive(GASPI_BLOCK)
 * for good, and a thread in gaspi_notify_waitsome with a long timeout on a notification
 * nobody sets. Term must neither pull the library out from under them nor make the blocked
 * receive return an error (the serving thread would end the process with it): the blocked
 * receive stays blocked until the process ends, the timed wait returns GASPI_ERR_NOINIT
 * at once, and the process exits 0. A thread that loops back into a blocking receive after
 * term blocks too; the thread that terminated gets GASPI_ERR_NOINIT from the same call. */
#include "check.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define MESSAGES 8

static atomic_int received;
static atomic_int receiving;

static double
now (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

static void *
serve (void *arg)
{
  (void) arg;
  char buf[64];
  for (;;) {
    gaspi_rank_t from;
    atomic_store (&receiving, 1);
    /* Any error here ends the process with 1: what such servers do. */
    CHECK (gaspi_passive_receive (0, 0, &from, sizeof buf, GASPI_BLOCK));
    atomic_store (&receiving, 0);
    atomic_fetch_add (&received, 1);
  }
  return NULL;
}

static atomic_int termed;
static atomic_int late_returned;

static void *
late (void *arg)
{
  (void) arg;
  while (!atomic_load (&termed))
    usleep (1000);
  gaspi_rank_t from;
  gaspi_passive_receive (0, 0, &from, 64, GASPI_BLOCK);
  atomic_store (&late_returned, 1);
  return NULL;
}

static gaspi_return_t waited;
static double waited_until;

static void *
wait_long (void *arg)
{
  (void) arg;
  gaspi_notification_id_t first;
  waited = gaspi_notify_waitsome (0, 7, 1, &first, 60000);
  waited_until = now ();
  return NULL;
}

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  CHECK (gaspi_segment_create (0, 4096, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));
  char *s;
  CHECK (gaspi_segment_ptr (0, (gaspi_pointer_t *) &s));

  pthread_attr_t detached;
  pthread_attr_init (&detached);
  pthread_attr_setdetachstate (&detached, PTHREAD_CREATE_DETACHED);
  pthread_t server, waiter;
  TRUE (pthread_create (&server, &detached, serve, NULL) == 0);
  TRUE (pthread_create (&waiter, NULL, wait_long, NULL) == 0);
  pthread_t latecomer;
  TRUE (pthread_create (&latecomer, &detached, late, NULL) == 0);

  /* Each rank sends its right neighbour MESSAGES passive messages (none in a job of one). */
  const int expect = n > 1 ? MESSAGES : 0;
  for (int k = 0; k < expect; k++) {
    snprintf (s + 1024, 64, "%d from %d", k, me);
    CHECK (gaspi_passive_send (0, 1024, (gaspi_rank_t) ((me + 1) % n), 64, GASPI_BLOCK));
  }
  const double start = now ();
  while (atomic_load (&received) < expect || !atomic_load (&receiving)) {
    TRUE (now () - start < 30.0);
    usleep (1000);
  }
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  /* The server is back in its receive, for good; the waiter in its wait. */
  usleep (50000);

  const double term = now ();
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  TRUE (pthread_join (waiter, NULL) == 0);
  if (waited != GASPI_ERR_NOINIT) {
    fprintf (stderr, "the timed wait returned %d (%s), expected GASPI_ERR_NOINIT\n",
             (int) waited, gaspi_error_str (waited));
    return 1;
  }
  TRUE (waited_until - term < 5.0);
  TRUE (atomic_load (&received) == expect);
  atomic_store (&termed, 1);
  gaspi_rank_t from;
  EXPECT (gaspi_passive_receive (0, 0, &from, 64, GASPI_BLOCK), GASPI_ERR_NOINIT);
  EXPECT (gaspi_proc_rank (&from), GASPI_ERR_NOINIT);
  /* Ended, the process does not join again (alike on every rank). */
  EXPECT (gaspi_proc_init (GASPI_TEST), GASPI_ERROR);
  usleep (50000);
  TRUE (!atomic_load (&late_returned));
  printf ("rank %d: term with a server blocked in its receive and a timed wait: ok\n", me);
  return 0;
}
