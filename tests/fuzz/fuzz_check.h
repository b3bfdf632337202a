/* Shared by the fuzz targets: invariant checks that abort (a finding for libFuzzer, a
   failure for the replay test) rather than assert, so they hold in release builds too. */
#ifndef WGML_FUZZ_CHECK_H
#define WGML_FUZZ_CHECK_H

#include "wgml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* A failure must come with a message; a malformed input with "<name>: <problem>", and no
   byte of a message may be a control or non-ASCII byte (names from the input are quoted). */
static inline void fuzz_check_failure(wgml_status s, const char *name)
{
    const char *m = wgml_last_error(NULL);
    FUZZ_CHECK(m[0] != 0);
    for (const char *p = m; *p; p++) FUZZ_CHECK(*p >= 0x20 && *p < 0x7F);
    if (s == WGML_ERROR_FORMAT) {
        size_t n = strlen(name);
        FUZZ_CHECK(strncmp(m, name, n) == 0 && m[n] == ':');
    } else
        FUZZ_CHECK(s == WGML_ERROR_OUT_OF_MEMORY);
}

#endif
