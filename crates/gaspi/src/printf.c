/* The variadic printing helpers of GASPI_Ext.h: Rust cannot define C-variadic functions, so
 * gaspi_printf and gaspi_printf_to (src/printf.rs) jump here with their arguments untouched. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int tiers_gaspi_rank (void);

/* The rank's prefix and the message, written in one piece (a message longer than the buffer
 * on the stack is formatted into one of its length: nothing is cut). */
static void
vprint (const char *fmt, va_list ap)
{
  char small[4096];
  char prefix[16] = "";
  int r = tiers_gaspi_rank ();
  if (r >= 0)
    snprintf (prefix, sizeof prefix, "%d: ", r);
  va_list again;
  va_copy (again, ap);
  int len = vsnprintf (small, sizeof small, fmt, ap);
  char *msg = small;
  if (len >= (int) sizeof small) {
    msg = malloc ((size_t) len + 1);
    if (msg != NULL)
      vsnprintf (msg, (size_t) len + 1, fmt, again);
    else
      msg = small; /* out of memory: the first 4095 bytes */
  }
  va_end (again);
  if (len >= 0) {
    flockfile (stdout);
    fputs (prefix, stdout);
    fputs (msg, stdout);
    fflush (stdout);
    funlockfile (stdout);
  }
  if (msg != small)
    free (msg);
}

void
tiers_gaspi_printf_c (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  vprint (fmt, ap);
  va_end (ap);
}

void
tiers_gaspi_printf_to_c (unsigned short rank, const char *fmt, ...)
{
  if (tiers_gaspi_rank () != (int) rank)
    return;
  va_list ap;
  va_start (ap, fmt);
  vprint (fmt, ap);
  va_end (ap);
}
