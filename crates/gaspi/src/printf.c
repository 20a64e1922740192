/* The variadic printing helpers of GASPI_Ext.h: Rust cannot define C-variadic functions, so
 * gaspi_printf and gaspi_printf_to (src/printf.rs) jump here with their arguments untouched. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tiers_gaspi_rank (void);

/* The rank's prefix and the message, formatted into one buffer (a message longer than the
 * buffer on the stack gets one of its length: nothing is cut) and written with one write(2)
 * after what stdio holds, so that lines of ranks sharing an output do not interleave (a
 * pipe keeps writes up to PIPE_BUF whole; a longer message may still be split by the
 * kernel). */
static void
vprint (const char *fmt, va_list ap)
{
  char small[4096];
  char prefix[16] = "";
  int r = tiers_gaspi_rank ();
  int p = r >= 0 ? snprintf (prefix, sizeof prefix, "%d: ", r) : 0;
  va_list again;
  va_copy (again, ap);
  int len = vsnprintf (small + p, sizeof small - (size_t) p, fmt, ap);
  char *buf = small;
  if (len >= 0 && (size_t) p + (size_t) len >= sizeof small) {
    buf = malloc ((size_t) p + (size_t) len + 1);
    if (buf != NULL)
      vsnprintf (buf + p, (size_t) len + 1, fmt, again);
    else {
      buf = small; /* out of memory: the first bytes that fit */
      len = (int) (sizeof small - 1) - p;
    }
  }
  va_end (again);
  if (len >= 0) {
    memcpy (buf, prefix, (size_t) p);
    size_t left = (size_t) p + (size_t) len;
    const char *at = buf;
    fflush (stdout);
    while (left > 0) {
      ssize_t w = write (STDOUT_FILENO, at, left);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        break;
      at += w;
      left -= (size_t) w;
    }
  }
  if (buf != small)
    free (buf);
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
