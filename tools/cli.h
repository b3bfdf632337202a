/* Small helpers shared by the train and generate commands: flag tables, whole-file reads,
   a monotonic clock and human-readable numbers. */
#ifndef WGML_TOOLS_CLI_H
#define WGML_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

typedef enum cli_type { CLI_INT, CLI_U64, CLI_DOUBLE, CLI_STRING, CLI_BOOL } cli_type;

/* One "--name value" flag (CLI_BOOL takes no value and stores 1 in an int), stored at
   byte offset `offset` of the options struct. */
typedef struct cli_flag {
    const char *name;
    cli_type type;
    size_t offset;
    const char *help;
} cli_flag;

/* Parses argv[1..] into opts. Returns 1 to go on, 0 after printing --help (exit 0), or -2
   after printing an error (exit 2). The defaults are what opts holds on entry; --help
   prints them. */
int cli_parse(int argc, char **argv, const cli_flag *flags, size_t n, void *opts, const char *usage, const char *about);

/* The whole file, malloc'd with a NUL after it; NULL on failure, with a message on stderr
   that starts with who (e.g. "wgml train"). */
uint8_t *cli_read_file(const char *who, const char *path, size_t *size);

/* Copies the file src to dst (replacing it); 0, or -1 with a message as cli_read_file's. */
int cli_copy_file(const char *who, const char *src, const char *dst);
/* snprintf(buf, size, "%s/%s", dir, name); returns buf. */
const char *cli_fmt_path(char *buf, size_t size, const char *dir, const char *name);

double cli_now(void);                 /* seconds, monotonic */
int cli_digits(int n);                /* decimal digits of n > 0 */
const char *cli_fmt(const char *fmt, double x);   /* formatted into one of 8 rotating buffers */
const char *cli_duration(double seconds);         /* "1:05", "2:03:10"; rotating buffers too */

#endif
