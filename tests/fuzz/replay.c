/* Runs a fuzz target over files without libFuzzer: every file named, and every file in each
   folder named. The normal build links each target with this, and ctest replays the seed
   corpus (and any crash input added to it) through the parsers on every `make test`. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return 1; }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    fclose(f);
    /* an exact-size copy, so a read past the end is past the allocation */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

/* Every file in the folder and its sub-folders (a few levels). */
static int run_dir(const char *dir, size_t *runs, int depth)
{
    int bad = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            if (depth < 3) bad += run_dir(p, runs, depth + 1);
            continue;
        }
        bad += run_file(p);
        (*runs)++;
    }
    if (d) closedir(d);
    return bad;
}

int main(int argc, char **argv)
{
    size_t runs = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) { perror(argv[i]); bad++; continue; }
        if (!S_ISDIR(sb.st_mode)) { bad += run_file(argv[i]); runs++; continue; }
        bad += run_dir(argv[i], &runs, 0);
    }
    printf("replayed %zu inputs\n", runs);
    printf("%zu passed, %d failed\n", runs - (size_t)bad, bad);
    return bad != 0 || runs == 0;
}
