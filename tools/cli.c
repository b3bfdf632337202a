/* Helpers shared by the subcommands (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void print_default(FILE *f, const cli_flag *fl, const void *opts)
{
    const char *p = (const char *)opts + fl->offset;
    switch (fl->type) {
    case CLI_INT: fprintf(f, "%d", *(const int *)p); break;
    case CLI_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case CLI_DOUBLE: fprintf(f, "%g", *(const double *)p); break;
    case CLI_STRING: fprintf(f, "%s", *(const char *const *)p ? *(const char *const *)p : "(none)"); break;
    case CLI_BOOL: fprintf(f, "%s", *(const int *)p ? "on" : "off"); break;
    }
}

static bool has_range(const cli_flag *fl)
{
    return fl->type == CLI_INT || fl->type == CLI_DOUBLE || (fl->type == CLI_U64 && (fl->lo != 0 || fl->hi != 0));
}

int cli_parse(int argc, char **argv, const cli_flag *flags, size_t n, void *opts, const char *usage, const char *about)
{
    return cli_parse_given(argc, argv, flags, n, opts, usage, about, NULL);
}

int cli_parse_given(int argc, char **argv, const cli_flag *flags, size_t n, void *opts, const char *usage, const char *about,
                    bool *given)
{
    if (given) memset(given, 0, n * sizeof *given);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: %s\n\n%s\n", usage, about);
            if (n) printf("\noptions (default, and range, in brackets):\n");
            for (size_t k = 0; k < n; k++) {
                printf("  %-16s %s [", flags[k].name, flags[k].help);
                print_default(stdout, &flags[k], opts);
                if (has_range(&flags[k])) printf("; %s .. %s", cli_fmt_number(flags[k].lo), cli_fmt_number(flags[k].hi));
                printf("]\n");
            }
            return 0;
        }
        const cli_flag *fl = NULL;
        const char *value = NULL;
        size_t len = strcspn(argv[i], "=");
        for (size_t k = 0; k < n; k++)
            if (strlen(flags[k].name) == len && !strncmp(argv[i], flags[k].name, len)) fl = &flags[k];
        if (!fl) {
            fprintf(stderr, "wgml %s: unknown option \"%s\" (see --help)\n", argv[0], argv[i]);
            return -2;
        }
        char *p = (char *)opts + fl->offset;
        if (given) given[fl - flags] = true;
        if (fl->type == CLI_BOOL) {
            if (argv[i][len] == '=') {
                fprintf(stderr, "wgml %s: %s takes no value\n", argv[0], fl->name);
                return -2;
            }
            *(int *)p = 1;
            continue;
        }
        if (argv[i][len] == '=') value = argv[i] + len + 1;
        else if (i + 1 < argc) value = argv[++i];
        else {
            fprintf(stderr, "wgml %s: %s needs a value\n", argv[0], fl->name);
            return -2;
        }
        char *end = NULL;
        errno = 0;
        bool ok = true;
        switch (fl->type) {
        case CLI_INT: {
            long v = strtol(value, &end, 10);
            ok = *value && !*end && !errno && v >= -2147483647L && v <= 2147483647L;
            if (ok) *(int *)p = (int)v;
            break;
        }
        case CLI_U64: {
            unsigned long long v = strtoull(value, &end, 10);
            ok = *value && !*end && !errno && value[0] != '-';
            if (ok) *(uint64_t *)p = v;
            break;
        }
        case CLI_DOUBLE: {
            double v = strtod(value, &end);
            ok = *value && !*end && !errno && isfinite(v);
            if (ok) *(double *)p = v;
            break;
        }
        case CLI_STRING: *(const char **)p = value; break;
        case CLI_BOOL: break;
        }
        if (!ok) {
            fprintf(stderr, "wgml %s: %s: \"%s\" is not a valid %s\n", argv[0], fl->name, value,
                    fl->type == CLI_DOUBLE ? "number" : "integer");
            return -2;
        }
        if (has_range(fl)) {
            double v = fl->type == CLI_INT ? *(int *)p : fl->type == CLI_U64 ? (double)*(uint64_t *)p : *(double *)p;
            if (!(v >= fl->lo && v <= fl->hi)) {
                fprintf(stderr, "wgml %s: %s must be in [%s, %s], not %s\n", argv[0], fl->name, cli_fmt_number(fl->lo),
                        cli_fmt_number(fl->hi), value);
                return -2;
            }
        }
    }
    return 1;
}

uint8_t *cli_read_file(const char *who, const char *path, size_t max, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s: %s\n", who, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        fprintf(stderr, "%s: %s is not a file\n", who, path);
        fclose(f);
        return NULL;
    }
    size_t cap = max < ((size_t)1 << 16) ? max : ((size_t)1 << 16), n = 0;
    uint8_t *buf = malloc(cap + 1);
    bool too_big = false;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= max) {   /* one more byte than max means too big */
            too_big = fgetc(f) != EOF;
            break;
        }
        size_t grow = cap > max / 2 ? max : 2 * cap;
        uint8_t *nb = realloc(buf, grow + 1);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap = grow;
    }
    bool err = ferror(f);
    int e = errno;
    fclose(f);
    if (!buf || err || too_big) {
        if (too_big) fprintf(stderr, "%s: %s holds more than %zu bytes, the most this command reads\n", who, path, max);
        else fprintf(stderr, "%s: cannot read %s: %s\n", who, path, buf ? strerror(e) : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *size = n;
    return buf;
}

FILE *cli_atomic_open(const char *who, const char *path, char *tmp, size_t tmp_size)
{
    if ((size_t)snprintf(tmp, tmp_size, "%s.tmp.%ld", path, (long)getpid()) >= tmp_size) {
        fprintf(stderr, "%s: the path %s is too long\n", who, path);
        return NULL;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        fprintf(stderr, "%s: cannot write %s: %s\n", who, path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
    }
    return f;
}

int cli_atomic_commit(const char *who, FILE *f, const char *tmp, const char *path)
{
    int err = 0;
    if (ferror(f)) err = errno ? errno : EIO;
    if (fflush(f) != 0 && !err) err = errno;
    if (fsync(fileno(f)) != 0 && !err) err = errno;
    if (fclose(f) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        fprintf(stderr, "%s: cannot write %s: %s\n", who, path, strerror(err));
        return -1;
    }
    return 0;
}

int cli_copy_file(const char *who, const char *src, const char *dst)
{
    size_t n = 0;
    uint8_t *data = cli_read_file(who, src, (size_t)1 << 30, &n);
    if (!data) return -1;
    char tmp[4200];
    FILE *f = cli_atomic_open(who, dst, tmp, sizeof tmp);
    int rc = -1;
    if (f) {
        errno = 0;
        fwrite(data, 1, n, f);
        rc = cli_atomic_commit(who, f, tmp, dst);
    }
    free(data);
    return rc;
}

const char *cli_fmt_path(char *buf, size_t size, const char *dir, const char *name)
{
    snprintf(buf, size, "%s/%s", dir, name);
    return buf;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cli_digits(int n)
{
    int d = 1;
    while (n >= 10) { n /= 10; d++; }
    return d;
}

static char *rotating(void)
{
    static char bufs[8][48];
    static int next;
    return bufs[next++ & 7];
}

const char *cli_fmt(const char *fmt, double x)
{
    char *b = rotating();
    snprintf(b, 48, fmt, x);
    return b;
}

const char *cli_fmt_number(double x)
{
    char *b = rotating();
    if (x == floor(x) && fabs(x) < 1e15) snprintf(b, 48, "%.0f", x);
    else snprintf(b, 48, "%g", x);
    return b;
}

const char *cli_duration(double seconds)
{
    char *b = rotating();
    if (!(seconds >= 0) || seconds > 1e8) seconds = 0;
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(b, 48, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(b, 48, "%ld:%02ld", s / 60, s % 60);
    return b;
}
