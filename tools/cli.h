/* Small helpers shared by the subcommands: flag tables with ranges, bounded whole-file
   reads, files written atomically, a monotonic clock and human-readable numbers. */
#ifndef WGML_TOOLS_CLI_H
#define WGML_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_type { CLI_INT, CLI_U64, CLI_DOUBLE, CLI_STRING, CLI_BOOL } cli_type;

/* One "--name value" flag (CLI_BOOL takes no value and stores 1 in an int), stored at
   byte offset `offset` of the options struct. Numbers must lie in [lo, hi] (a CLI_U64
   flag with lo = hi = 0 takes any value). */
typedef struct cli_flag {
    const char *name;
    cli_type type;
    size_t offset;
    const char *help;
    double lo, hi;
} cli_flag;

/* Parses argv[1..] into opts. Returns 1 to go on, 0 after printing --help (exit 0), or -2
   after printing an error (exit 2). The defaults are what opts holds on entry; --help
   prints them and the ranges. A flag given twice takes its last value. */
int cli_parse(int argc, char **argv, const cli_flag *flags, size_t n, void *opts, const char *usage, const char *about);
/* As cli_parse, and given[k] says whether flag k was on the command line. */
int cli_parse_given(int argc, char **argv, const cli_flag *flags, size_t n, void *opts, const char *usage, const char *about,
                    bool *given);

/* The whole of the file (or FIFO) at path, malloc'd with a NUL after it; NULL on failure,
   with a message on stderr that starts with who (e.g. "wgml train"). More than max bytes
   is an error (it says so), as is a folder or a device. */
uint8_t *cli_read_file(const char *who, const char *path, size_t max, size_t *size);

/* Files written atomically: cli_atomic_open creates "<path>.tmp.<pid>" (its name in tmp);
   cli_atomic_commit checks every write, flushes it to disk and renames it over path, or
   removes it and prints why (a full disk, a write error) on stderr after who. Both
   return 0, or -1 after a message. On failure nothing is left at path that was not
   there before. */
FILE *cli_atomic_open(const char *who, const char *path, char *tmp, size_t tmp_size);
int cli_atomic_commit(const char *who, FILE *f, const char *tmp, const char *path);

/* Copies the file src to dst atomically; 0, or -1 after a message. */
int cli_copy_file(const char *who, const char *src, const char *dst);
/* snprintf(buf, size, "%s/%s", dir, name); returns buf. */
const char *cli_fmt_path(char *buf, size_t size, const char *dir, const char *name);

double cli_now(void);                 /* seconds, monotonic */
int cli_digits(int n);                /* decimal digits of n > 0 */
const char *cli_fmt(const char *fmt, double x);   /* formatted into one of 8 rotating buffers */
const char *cli_duration(double seconds);         /* "1:05", "2:03:10"; rotating buffers too */
const char *cli_fmt_number(double x);             /* "1048576", "1e-12"; rotating buffers too */

#endif
