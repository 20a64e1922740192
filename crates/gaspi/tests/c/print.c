/* gaspi_printf and gaspi_printf_to: the rank's prefix and the whole message, however long
 * (a 10,000-byte message and the line after it), written to standard output, read back. */
#include "check.h"
#include <unistd.h>

int
main (void)
{
  CHECK (gaspi_proc_init (GASPI_BLOCK));
  gaspi_rank_t me;
  CHECK (gaspi_proc_rank (&me));
  char path[64];
  snprintf (path, sizeof path, "/tmp/tiers-gaspi-print-%d-%d", (int) getpid (), (int) me);
  fflush (stdout);
  int saved = dup (1);
  TRUE (saved >= 0 && freopen (path, "w", stdout) != NULL);
  static char big[10001];
  memset (big, 'x', 10000);
  gaspi_printf ("%s|\n", big);
  gaspi_printf ("after %d\n", 7);
  gaspi_printf_to (me, "to me\n");
  gaspi_printf_to (me + 1, "to another\n");
  fflush (stdout);
  TRUE (dup2 (saved, 1) == 1);
  FILE *f = fopen (path, "r");
  TRUE (f != NULL);
  static char got[20000];
  size_t n = fread (got, 1, sizeof got - 1, f);
  fclose (f);
  unlink (path);
  got[n] = 0;
  char want[64];
  int p = snprintf (want, sizeof want, "%d: ", (int) me);
  TRUE (n == (size_t) p + 10002 + (size_t) p + 8 + (size_t) p + 6);
  TRUE (strncmp (got, want, p) == 0);
  for (int i = 0; i < 10000; i++)
    TRUE (got[p + i] == 'x');
  TRUE (strncmp (got + p + 10000, "|\n", 2) == 0);
  snprintf (want, sizeof want, "%d: after 7\n%d: to me\n", (int) me, (int) me);
  TRUE (strcmp (got + p + 10002, want) == 0);
  CHECK (gaspi_proc_term (GASPI_BLOCK));
  return 0;
}
