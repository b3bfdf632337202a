/* For the libFuzzer builds, which compile src/io/ alone (no WebGPU runtime): the two
   functions of src/context.c that the parsers use. */
#include "io.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char message[1024];

wgml_status wgml__fail(wgml_context *ctx, wgml_status status, const char *fmt, ...)
{
    (void)ctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return status;
}

const char *wgml_last_error(const wgml_context *ctx)
{
    (void)ctx;
    return message;
}
