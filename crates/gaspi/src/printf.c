/* The variadic printing helpers of GASPI_Ext.h: Rust cannot define C-variadic functions, so
 * gaspi_printf and gaspi_printf_to (src/printf.rs) jump here with their arguments untouched. */
#include <stdarg.h>
#include <stdio.h>

int tiers_gaspi_rank (void);

static void
vprint (const char *fmt, va_list ap)
{
  char buf[4096];
  int r = tiers_gaspi_rank ();
  int n = r >= 0 ? snprintf (buf, sizeof buf, "%d: ", r) : 0;
  vsnprintf (buf + n, sizeof buf - n, fmt, ap);
  fputs (buf, stdout);
  fflush (stdout);
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
