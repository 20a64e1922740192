/* Checks for the C tests of tiers' GASPI library: a failed check prints where and exits 1,
 * which fails the job. */
#ifndef TIERS_GASPI_CHECK_H
#define TIERS_GASPI_CHECK_H
#include <GASPI.h>
#include <GASPI_Ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The call succeeds. */
#define CHECK(call)                                                                         \
  do {                                                                                      \
    gaspi_return_t r_ = (call);                                                             \
    if (r_ != GASPI_SUCCESS) {                                                              \
      fprintf (stderr, "%s:%d: %s returned %d (%s)\n", __FILE__, __LINE__, #call, (int) r_, \
               gaspi_error_str (r_));                                                       \
      exit (1);                                                                             \
    }                                                                                       \
  } while (0)

/* The call returns exactly `code`. */
#define EXPECT(call, code)                                                                  \
  do {                                                                                      \
    gaspi_return_t r_ = (call);                                                             \
    if (r_ != (code)) {                                                                     \
      fprintf (stderr, "%s:%d: %s returned %d (%s), expected %s\n", __FILE__, __LINE__,     \
               #call, (int) r_, gaspi_error_str (r_), #code);                               \
      exit (1);                                                                             \
    }                                                                                       \
  } while (0)

/* The condition holds. */
#define TRUE(cond)                                                                          \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf (stderr, "%s:%d: %s does not hold\n", __FILE__, __LINE__, #cond);             \
      exit (1);                                                                             \
    }                                                                                       \
  } while (0)

#endif
