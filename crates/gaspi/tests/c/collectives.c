/* Collectives: allreduce of every type and operation over all ranks, allreduce_user with a
 * reduction of the program's own, and a group of the even ranks with its barrier and
 * allreduce. */
#include "check.h"

typedef struct
{
  double val;
  int rank;
  int pad;
} maxloc_t;

/* Element-wise max with the rank that holds it (the smaller rank on ties). */
static gaspi_return_t
maxloc (gaspi_pointer_t const a, gaspi_pointer_t const b, gaspi_pointer_t const out,
        gaspi_reduce_state_t const state, const gaspi_number_t num, const gaspi_size_t esize,
        const gaspi_timeout_t timeout)
{
  (void) timeout;
  if (esize != sizeof (maxloc_t) || *(int *) state != 7)
    return GASPI_ERROR;
  const maxloc_t *x = a, *y = b;
  maxloc_t *o = out;
  for (gaspi_number_t i = 0; i < num; i++) {
    int take_y = y[i].val > x[i].val || (y[i].val == x[i].val && y[i].rank < x[i].rank);
    o[i] = take_y ? y[i] : x[i];
  }
  return GASPI_SUCCESS;
}

int
main (void)
{
  /* More elements than one reduction slot holds (16 KiB): reductions over groups other than
   * GASPI_GROUP_ALL go in rounds. */
  gaspi_config_t conf;
  CHECK (gaspi_config_get (&conf));
  conf.allreduce_elem_max = 5000;
  CHECK (gaspi_config_set (conf));
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me, n;
  CHECK (gaspi_proc_rank (&me));
  CHECK (gaspi_proc_num (&n));
  gaspi_number_t emax;
  CHECK (gaspi_allreduce_elem_max (&emax));
  TRUE (emax == 5000);

  /* 255 ints: element i of rank r is r + i. */
  int si[255], ri[255];
  for (int i = 0; i < 255; i++)
    si[i] = me + i;
  CHECK (gaspi_allreduce (si, ri, 255, GASPI_OP_SUM, GASPI_TYPE_INT, GASPI_GROUP_ALL,
                          GASPI_BLOCK));
  for (int i = 0; i < 255; i++)
    TRUE (ri[i] == n * (n - 1) / 2 + n * i);
  CHECK (gaspi_allreduce (si, ri, 255, GASPI_OP_MIN, GASPI_TYPE_INT, GASPI_GROUP_ALL,
                          GASPI_BLOCK));
  TRUE (ri[0] == 0 && ri[254] == 254);
  double sd[2] = { -1.5 * me, 0.25 * me }, rd[2];
  CHECK (gaspi_allreduce (sd, rd, 2, GASPI_OP_MAX, GASPI_TYPE_DOUBLE, GASPI_GROUP_ALL,
                          GASPI_BLOCK));
  TRUE (rd[0] == 0.0 && rd[1] == 0.25 * (n - 1));
  float sf = 1.0f, rf;
  CHECK (gaspi_allreduce (&sf, &rf, 1, GASPI_OP_SUM, GASPI_TYPE_FLOAT, GASPI_GROUP_ALL,
                          GASPI_BLOCK));
  TRUE (rf == (float) n);
  long sl = -(long) me, rl;
  CHECK (gaspi_allreduce (&sl, &rl, 1, GASPI_OP_MIN, GASPI_TYPE_LONG, GASPI_GROUP_ALL,
                          GASPI_BLOCK));
  TRUE (rl == -(long) (n - 1));
  unsigned su = 1u << me, ru;
  CHECK (gaspi_allreduce (&su, &ru, 1, GASPI_OP_SUM, GASPI_TYPE_UINT, GASPI_GROUP_ALL,
                          GASPI_BLOCK));
  TRUE (ru == (1u << n) - 1);
  EXPECT (gaspi_allreduce (si, ri, emax + 1, GASPI_OP_SUM, GASPI_TYPE_INT, GASPI_GROUP_ALL,
                           GASPI_BLOCK),
          GASPI_ERR_INV_NUM);

  /* allreduce_user: the maximum of 4 values and where it is. */
  maxloc_t mine[4], res[4];
  for (int i = 0; i < 4; i++) {
    mine[i].val = (i == 0) ? me : (i == 1) ? -me : (i == 2) ? 5.0 : (double) ((me * 7 + i) % n);
    mine[i].rank = me;
    mine[i].pad = 0;
  }
  int state = 7;
  CHECK (gaspi_allreduce_user (mine, res, 4, sizeof (maxloc_t), maxloc, &state, GASPI_GROUP_ALL,
                               GASPI_BLOCK));
  TRUE (res[0].val == n - 1 && res[0].rank == n - 1);
  TRUE (res[1].val == 0 && res[1].rank == 0);
  TRUE (res[2].val == 5.0 && res[2].rank == 0);
  TRUE (res[3].val == n - 1);
  /* More bytes than allreduce_buf_size is a size error (a count above the maximum, a count
   * error). */
  gaspi_size_t abuf;
  CHECK (gaspi_allreduce_buf_size (&abuf));
  EXPECT (gaspi_allreduce_user (mine, res, 4, abuf / 4 + 1, maxloc, &state, GASPI_GROUP_ALL,
                                GASPI_BLOCK),
          GASPI_ERR_INV_SIZE);
  EXPECT (gaspi_allreduce_user (mine, res, 2, ~(gaspi_size_t) 0, maxloc, &state,
                                GASPI_GROUP_ALL, GASPI_BLOCK),
          GASPI_ERR_INV_SIZE);
  /* Elements of no bytes: the callback would get buffers that hold nothing. */
  EXPECT (gaspi_allreduce_user (mine, res, 4, 0, maxloc, &state, GASPI_GROUP_ALL, GASPI_BLOCK),
          GASPI_ERR_INV_SIZE);
  EXPECT (gaspi_allreduce_user (mine, res, emax + 1, 1, maxloc, &state, GASPI_GROUP_ALL,
                                GASPI_BLOCK),
          GASPI_ERR_INV_NUM);
  /* A reduction that fails makes the call fail (one rank alone reduces nothing). */
  state = 0;
  if (n > 1)
    TRUE (gaspi_allreduce_user (mine, res, 4, sizeof (maxloc_t), maxloc, &state, GASPI_GROUP_ALL,
                              GASPI_BLOCK) != GASPI_SUCCESS);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));

  /* The even ranks as a group. */
  if (me % 2 == 0) {
    gaspi_group_t g;
    CHECK (gaspi_group_create (&g));
    TRUE (g != GASPI_GROUP_ALL);
    for (gaspi_rank_t r = 0; r < n; r += 2)
      CHECK (gaspi_group_add (g, r));
    EXPECT (gaspi_group_add (g, 0), GASPI_ERR_INV_RANK);
    CHECK (gaspi_group_commit (g, GASPI_BLOCK));
    gaspi_number_t gs;
    CHECK (gaspi_group_size (g, &gs));
    TRUE (gs == (gaspi_number_t) (n + 1) / 2);
    gaspi_rank_t ranks[64];
    CHECK (gaspi_group_ranks (g, ranks));
    for (gaspi_number_t i = 0; i < gs; i++)
      TRUE (ranks[i] == 2 * i);
    for (int k = 0; k < 20; k++) {
      CHECK (gaspi_barrier (g, GASPI_BLOCK));
      int one = me + k, sum;
      CHECK (gaspi_allreduce (&one, &sum, 1, GASPI_OP_SUM, GASPI_TYPE_INT, g, GASPI_BLOCK));
      int expect = 0;
      for (gaspi_number_t i = 0; i < gs; i++)
        expect += 2 * i + k;
      TRUE (sum == expect);
    }
    /* 5000 doubles (40,000 bytes, three rounds), and 5000 ints (two rounds). */
    static double dv[5000], dsum[5000];
    static int iv[5000], imax[5000];
    for (int i = 0; i < 5000; i++) {
      dv[i] = me * 0.5 + i;
      iv[i] = me * 1000 + i;
    }
    CHECK (gaspi_allreduce (dv, dsum, 5000, GASPI_OP_SUM, GASPI_TYPE_DOUBLE, g, GASPI_BLOCK));
    CHECK (gaspi_allreduce (iv, imax, 5000, GASPI_OP_MAX, GASPI_TYPE_INT, g, GASPI_BLOCK));
    double evens = 0;
    for (gaspi_number_t i = 0; i < gs; i++)
      evens += 2 * i;
    int top = 2 * (gs - 1);
    for (int i = 0; i < 5000; i++) {
      TRUE (dsum[i] == evens * 0.5 + (double) gs * i);
      TRUE (imax[i] == top * 1000 + i);
    }
    gaspi_number_t groups;
    CHECK (gaspi_group_num (&groups));
    TRUE (groups == 2);
    CHECK (gaspi_group_delete (g));
    EXPECT (gaspi_barrier (g, GASPI_BLOCK), GASPI_ERR_INV_GROUP);
  }
  EXPECT (gaspi_group_delete (GASPI_GROUP_ALL), GASPI_ERR_INV_GROUP);
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));

  /* A group id used again by other members: ranks 0 and 1 reduce once on a group, which is
   * then deleted, and ranks 0 and n - 1 reduce three times on a new group with the same id
   * (rank n - 1 never reduced on that id before, rank 0 did). */
  if (n >= 3) {
    gaspi_group_t g = 0;
    if (me <= 1) {
      CHECK (gaspi_group_create (&g));
      CHECK (gaspi_group_add (g, 0));
      CHECK (gaspi_group_add (g, 1));
      CHECK (gaspi_group_commit (g, GASPI_BLOCK));
      long v = 1000 + me, sum;
      CHECK (gaspi_allreduce (&v, &sum, 1, GASPI_OP_SUM, GASPI_TYPE_LONG, g, GASPI_BLOCK));
      TRUE (sum == 2001);
      CHECK (gaspi_group_delete (g));
    }
    CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
    if (me == 0 || me == n - 1) {
      gaspi_group_t h;
      CHECK (gaspi_group_create (&h));
      TRUE (me != 0 || h == g);
      CHECK (gaspi_group_add (h, 0));
      CHECK (gaspi_group_add (h, n - 1));
      CHECK (gaspi_group_commit (h, GASPI_BLOCK));
      for (long k = 1; k <= 3; k++) {
        long v = 1000 * k + me, sum;
        CHECK (gaspi_allreduce (&v, &sum, 1, GASPI_OP_SUM, GASPI_TYPE_LONG, h, GASPI_BLOCK));
        TRUE (sum == 2000 * k + n - 1);
      }
      CHECK (gaspi_group_delete (h));
    }
  }
  CHECK (gaspi_barrier (GASPI_GROUP_ALL, GASPI_BLOCK));
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
