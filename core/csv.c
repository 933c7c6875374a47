/* csv.c: CSV fields and files (see csv.h). */
#include <errno.h>
#include "core/csv.h"

void csv_field(FILE *out, const char *text) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"') fputc('"', out);
        fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, out);
    }
    fputc('"', out);
}

int csv_close(FILE *f) {
    int bad = ferror(f);
    int saved = errno;
    if (fclose(f) != 0) return -1;
    if (bad) {
        errno = saved ? saved : EIO;
        return -1;
    }
    return 0;
}
