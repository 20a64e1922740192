/* Calls with a timeout return within it while another thread of the rank waits in the library
 * on what they need (GPI-2 takes its locks with the call's timeout): a passive receive while
 * another thread blocks in one, a passive send while another thread blocks in one on a full
 * mailbox, a group's barrier and GASPI_GROUP_ALL's allreduce while other
 * threads wait in blocking ones. And a collective that timed out must be resumed before
 * another collective of its group starts: GASPI_ERR_ACTIVE_COLL, as under GPI-2. */
#include "check.h"
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static double
now (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

/* The call returns in time: GASPI_TIMEOUT, or success where what it waits for was free. */
#define IN_TIME(call)                                                                       \
  do {                                                                                      \
    const double t0_ = now ();                                                              \
    gaspi_return_t r_ = (call);                                                             \
    TRUE (r_ == GASPI_TIMEOUT || r_ == GASPI_SUCCESS);                                      \
    TRUE (now () - t0_ < 1.5);                                                              \
  } while (0)

/* The call returns GASPI_TIMEOUT, well within a second and a half. */
#define TIMES_OUT(call)                                                                     \
  do {                                                                                      \
    const double t0_ = now ();                                                              \
    EXPECT (call, GASPI_TIMEOUT);                                                           \
    TRUE (now () - t0_ < 1.5);                                                              \
  } while (0)

static gaspi_group_t grp;
static gaspi_return_t bar_ret = GASPI_ERROR, red_ret = GASPI_ERROR;
static int red_out;

static void *
receive_forever (void *arg)
{
  (void) arg;
  gaspi_rank_t from;
  /* No message ever comes: this receive holds on until the process ends. */
  gaspi_passive_receive (0, 0, &from, 64, GASPI_BLOCK);
  return NULL;
}

static gaspi_rank_t right;

static void *
send_forever (void *arg)
{
  (void) arg;
  /* The right neighbour never receives: once its mailbox is full (16 messages on the shm and
   * tcp engines; MPI may buffer them all), a send holds on until the process ends. */
  for (int k = 0; k < 1000; k++)
    if (gaspi_passive_send (0, 0, right, 64, GASPI_BLOCK) != GASPI_SUCCESS)
      break;
  return NULL;
}

static void *
barrier_blocking (void *arg)
{
  (void) arg;
  bar_ret = gaspi_barrier (grp, GASPI_BLOCK);
  return NULL;
}

static void *
allreduce_blocking (void *arg)
{
  (void) arg;
  int one = 1;
  red_ret = gaspi_allreduce (&one, &red_out, 1, GASPI_OP_SUM, GASPI_TYPE_INT, GASPI_GROUP_ALL,
                             GASPI_BLOCK);
  return NULL;
}

/* Starts `f` in a thread and gives it time to enter its call. */
static pthread_t
start (void *(*f) (void *), int detached)
{
  pthread_t t;
  TRUE (pthread_create (&t, NULL, f, NULL) == 0);
  if (detached)
    TRUE (pthread_detach (t) == 0);
  usleep (100000);
  return t;
}

static gaspi_return_t
sum (gaspi_pointer_t const a, gaspi_pointer_t const b, gaspi_pointer_t const out,
     gaspi_reduce_state_t const state, const gaspi_number_t num, const gaspi_size_t esize,
     const gaspi_timeout_t timeout)
{
  (void) state;
  (void) esize;
  (void) timeout;
  for (gaspi_number_t i = 0; i < num; i++)
    ((int *) out)[i] = ((int *) a)[i] + ((int *) b)[i];
  return GASPI_SUCCESS;
}

/* Waits for notification `id` of segment 0 and resets it. */
static void
await (gaspi_notification_id_t id)
{
  gaspi_notification_id_t got;
  gaspi_notification_t v;
  CHECK (gaspi_notify_waitsome (0, id, 1, &got, GASPI_BLOCK));
  CHECK (gaspi_notify_reset (0, got, &v));
}

/* Sets notification `id` of segment 0 at every other rank. */
static void
tell_others (gaspi_rank_t me, gaspi_rank_t n, gaspi_notification_id_t id)
{
  for (gaspi_rank_t r = 0; r < n; r++)
    if (r != me)
      CHECK (gaspi_notify (0, r, id, 1, 0, GASPI_BLOCK));
  CHECK (gaspi_wait (0, GASPI_BLOCK));
}

int
main (void)
{
  /* A call that hangs fails the test rather than holding it. */
  alarm (60);
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  CHECK (gaspi_segment_create (0, 4096, GASPI_GROUP_ALL, GASPI_BLOCK, GASPI_MEM_INITIALIZED));
  CHECK (gaspi_group_create (&grp));
  for (gaspi_rank_t r = 0; r < n; r++)
    CHECK (gaspi_group_add (grp, r));
  CHECK (gaspi_group_commit (grp, GASPI_BLOCK));

  /* A receive with a timeout while another thread blocks in one. */
  start (receive_forever, 1);
  gaspi_rank_t from;
  TIMES_OUT (gaspi_passive_receive (0, 64, &from, 64, 200));
  TIMES_OUT (gaspi_passive_receive (0, 64, &from, 64, GASPI_TEST));
  /* A send with a timeout while another thread blocks in one (the first message that reaches
   * the right neighbour ends its blocked receive, once every rank is done with the receives
   * above; nothing receives the others). */
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  right = (me + 1) % n;
  start (send_forever, 1);
  usleep (200000);
  IN_TIME (gaspi_passive_send (0, 0, right, 64, 200));
  IN_TIME (gaspi_passive_send (0, 0, right, 64, GASPI_TEST));

  int one = 1, res = 0;
  if (n > 1 && me == 0) {
    /* Rank 0's other threads wait in the group's barrier and in GASPI_GROUP_ALL's allreduce,
     * which the other ranks enter only when told: this thread's calls time out. */
    pthread_t b = start (barrier_blocking, 0);
    TIMES_OUT (gaspi_barrier (grp, 200));
    TIMES_OUT (gaspi_barrier (grp, GASPI_TEST));
    pthread_t a = start (allreduce_blocking, 0);
    TIMES_OUT (gaspi_allreduce (&one, &res, 1, GASPI_OP_SUM, GASPI_TYPE_INT, GASPI_GROUP_ALL,
                                200));
    tell_others (me, n, 0);
    TRUE (pthread_join (b, NULL) == 0 && pthread_join (a, NULL) == 0);
    CHECK (bar_ret);
    CHECK (red_ret);
    TRUE (red_out == n);
  } else if (n > 1) {
    await (0);
    CHECK (gaspi_barrier (grp, GASPI_BLOCK));
    CHECK (gaspi_allreduce (&one, &res, 1, GASPI_OP_SUM, GASPI_TYPE_INT, GASPI_GROUP_ALL,
                            GASPI_BLOCK));
    TRUE (res == n);
  }

  /* A collective of the group that timed out on rank 0 (the others enter it when told) must
   * be resumed before another one starts there: a barrier, then an allreduce. */
  gaspi_return_t r;
  if (n > 1 && me == 0) {
    EXPECT (gaspi_barrier (grp, 50), GASPI_TIMEOUT);
    EXPECT (gaspi_allreduce (&one, &res, 1, GASPI_OP_SUM, GASPI_TYPE_INT, grp, 50),
            GASPI_ERR_ACTIVE_COLL);
    EXPECT (gaspi_allreduce_user (&one, &res, 1, sizeof one, sum, NULL, grp, 50),
            GASPI_ERR_ACTIVE_COLL);
    tell_others (me, n, 1);
    while ((r = gaspi_barrier (grp, 10)) == GASPI_TIMEOUT)
      ;
    CHECK (r);
    EXPECT (gaspi_allreduce (&one, &res, 1, GASPI_OP_SUM, GASPI_TYPE_INT, grp, 50),
            GASPI_TIMEOUT);
    EXPECT (gaspi_barrier (grp, 50), GASPI_ERR_ACTIVE_COLL);
    EXPECT (gaspi_allreduce_user (&one, &res, 1, sizeof one, sum, NULL, grp, 50),
            GASPI_ERR_ACTIVE_COLL);
    tell_others (me, n, 2);
    while ((r = gaspi_allreduce (&one, &res, 1, GASPI_OP_SUM, GASPI_TYPE_INT, grp, 10))
           == GASPI_TIMEOUT)
      ;
    CHECK (r);
    TRUE (res == n);
  } else if (n > 1) {
    await (1);
    CHECK (gaspi_barrier (grp, GASPI_BLOCK));
    await (2);
    CHECK (gaspi_allreduce (&one, &res, 1, GASPI_OP_SUM, GASPI_TYPE_INT, grp, GASPI_BLOCK));
    TRUE (res == n);
  }
  /* Completed, the group takes any collective again. */
  CHECK (gaspi_allreduce_user (&one, &res, 1, sizeof one, sum, NULL, grp, GASPI_BLOCK));
  TRUE (res == n);
  CHECK (gaspi_barrier (grp, GASPI_BLOCK));
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  /* The receiving thread stays blocked through term, as under GPI-2. */
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
