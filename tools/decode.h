/* What `wgml generate` and `wgml chat` share: the sampling options and their flags, the
   defaults generation_config.json gives them, the sampler that picks each token
   (wgml_sampler_next_gpu on the position's logits), and the printer that streams decoded text up to a stop string. */
#ifndef WGML_TOOLS_DECODE_H
#define WGML_TOOLS_DECODE_H

#include "cli.h"
#include "wgml.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct sample_opts {
    int top_k;
    double temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
    uint64_t seed;
} sample_opts;

/* The defaults of the sampling flags. */
#define SAMPLE_DEFAULTS { .top_k = 40, .temperature = 0.8, .top_p = 1, .min_p = 0, .repetition_penalty = 1, .seed = 1 }

/* The sampling flags' rows of a command's table, for options struct T whose member M is a
   sample_opts. */
#define SAMPLE_FLAGS(T, M)                                                                                                  \
    { "--temperature", CLI_DOUBLE, offsetof(T, M.temperature), "sampling temperature (0: greedy)", 0, 100 },                 \
    { "--top-k", CLI_INT, offsetof(T, M.top_k), "sample among the k most likely tokens (0: all)", 0, 1 << 24 },             \
    { "--top-p", CLI_DOUBLE, offsetof(T, M.top_p), "sample among the most likely tokens whose probabilities sum to p "       \
      "(1: all)", 1e-6, 1 },                                                                                                 \
    { "--min-p", CLI_DOUBLE, offsetof(T, M.min_p), "drop tokens less likely than min-p times the most likely (0: none)", 0, \
      1 },                                                                                                                   \
    { "--repetition-penalty", CLI_DOUBLE, offsetof(T, M.repetition_penalty), "tokens already in the text: logit / r "      \
      "where positive, * r otherwise (1: none)", 1e-3, 100 },                                                                \
    { "--presence-penalty", CLI_DOUBLE, offsetof(T, M.presence_penalty), "subtracted from the logit of a token already "   \
      "in the text", -100, 100 },                                                                                            \
    { "--frequency-penalty", CLI_DOUBLE, offsetof(T, M.frequency_penalty), "subtracted from a token's logit once per "     \
      "time it is in the text", -100, 100 },                                                                                 \
    { "--seed", CLI_U64, offsetof(T, M.seed), "sampling seed", 0, 0 }

/* Sampling defaults from the folder's generation_config.json, where the command line did
   not set them (given[f] for flags[f]): do_sample false means greedy; temperature, top_k,
   top_p, min_p and repetition_penalty as transformers reads them. A missing file changes
   nothing; a malformed one is an error: -1 after a message that starts with who. */
int generation_config(const char *who, const char *model, sample_opts *o, const bool *given, const cli_flag *flags,
                      size_t nflags);

/* "greedy" or "temperature 0.8, top-k 40, ...". */
void sample_opts_describe(const sample_opts *o, FILE *f);

typedef struct sampler {
    wgml_engine *e;
    wgml_tensor *logits;     /* the model writes the position's logits here */
    uint32_t vocab;
    wgml_sampler *smp;
} sampler;

/* 0, or -1 after a message (nothing left allocated). */
int sampler_init(const char *who, sampler *s, wgml_context *ctx, wgml_engine *e, uint32_t vocab, const sample_opts *o);
void sampler_free(sampler *s);
/* The next token from s->logits; hist[0..n) is the text so far (for the penalties). */
wgml_status sampler_next(sampler *s, const uint32_t *hist, size_t n, uint32_t *out);

/* Streams decoded text to stdout, or to write (user its first argument) when set. With a
   stop string, the text that could still begin it is held back until the next token
   decides; the output ends before the stop string (stopped then true). Zero-initialise,
   set tok and stop (and write). */
typedef struct printer {
    const wgml_tokenizer *tok;
    const char *stop;
    size_t stop_len;
    void (*write)(void *user, const char *text, size_t len);
    void *user;
    unsigned char *pending;   /* not yet printed */
    size_t n, cap;
    bool stopped;
} printer;

/* text[0..n) as a NUL-terminated string of valid UTF-8 (malloc'd; NULL when out of
   memory): each byte that starts no valid sequence, and each NUL, becomes U+FFFD, as
   Python's errors="replace" does. Decoded tokens need not be valid UTF-8 (byte tokens
   of a model that has not learned them), JSON strings must. */
char *text_utf8(const char *text, size_t n);

/* Prints what token id decides; false when out of memory. */
bool printer_emit(printer *p, uint32_t id);
/* Prints what is held back (the text ended without the stop string). */
void printer_finish(printer *p);

#endif
