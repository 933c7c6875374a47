/* csv.h: the CSV conventions of flashgen's outputs (`fgbench speed --csv`, `flashgen tune --show --csv`):
 * RFC 4180 fields, one record per line. */
#ifndef FG_CSV_H
#define FG_CSV_H

#include <stdio.h>

/* Writes text as one quoted field: a quote inside is doubled, control bytes become spaces so a record
 * stays one line. */
void csv_field(FILE *out, const char *text);

/* Closes a CSV file written with stdio: 0 when every write and the close succeeded, else -1 with errno
 * set (the file is closed either way). */
int csv_close(FILE *f);

#endif
