/* Training data: each kind of file tokenised with the right tokens learned (the byte
   tokenizer makes the expected ids the bytes themselves), errors that name the line, and
   the batcher: packed windows, padded examples, epochs, parts, and a saved state that
   gives the same batches again. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static wgml_tokenizer *bytes_tok;

static const char *in_dir(const char *name)
{
    static char buf[4][128];
    static int next;
    char *b = buf[next++ & 3];
    snprintf(b, 128, "%s/%s", dir, name);
    return b;
}

static void write_file(const char *name, const char *text)
{
    FILE *f = fopen(in_dir(name), "w");
    TH_CHECK(f != NULL, "cannot write %s", name);
    if (f) { fputs(text, f); fclose(f); }
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/wgml_test_data_XXXXXX");
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    TH_EXPECT(wgml_tokenizer_bytes(&bytes_tok), WGML_OK);
}

/* The ids and learned flags of the whole dataset, as two strings: the bytes, and '1'/'0'. */
static void flatten(const wgml_dataset *d, char *ids, char *train, size_t cap)
{
    size_t at = 0;
    for (size_t e = 0; e < wgml_dataset_examples(d); e++) {
        const uint8_t *tr;
        size_t len;
        const uint32_t *p = wgml_dataset_example(d, e, &tr, &len);
        for (size_t i = 0; i < len && at + 1 < cap; i++, at++) {
            ids[at] = p[i] == 0 ? '|' : (char)p[i];   /* the EOS (id 0) shows as '|' */
            train[at] = tr[i] ? '1' : '0';
        }
    }
    ids[at] = train[at] = 0;
}

static void test_kinds(void)
{
    wgml_dataset_options eos = { .append_eos = true, .eos_id = 0, .chat_format = WGML_CHAT_CHATML };
    char ids[512], tr[512];
    wgml_dataset *d = NULL;

    write_file("plain.txt", "ab\ncd");
    TH_EXPECT(wgml_dataset_load(in_dir("plain.txt"), bytes_tok, &eos, &d), WGML_OK);
    if (d) {
        flatten(d, ids, tr, sizeof ids);
        TH_CHECK(wgml_dataset_kind(d) == WGML_DATA_TEXT && wgml_dataset_examples(d) == 1 && strcmp(ids, "ab\ncd|") == 0 &&
                 strcmp(tr, "111111") == 0, "plain text: \"%s\" \"%s\"", ids, tr);
    }
    wgml_dataset_free(d);

    write_file("t.jsonl", "{\"text\": \"xy\"}\n\n  {\"text\": \"z\"}  \r\n");
    TH_EXPECT(wgml_dataset_load(in_dir("t.jsonl"), bytes_tok, &eos, &d), WGML_OK);
    if (d) {
        flatten(d, ids, tr, sizeof ids);
        TH_CHECK(wgml_dataset_examples(d) == 2 && strcmp(ids, "xy|z|") == 0 && strcmp(tr, "11111") == 0,
                 "text records: \"%s\" \"%s\"", ids, tr);
    }
    wgml_dataset_free(d);

    write_file("pc.jsonl", "{\"prompt\": \"Q:\", \"completion\": \"A\"}\n{\"prompt\": \"\", \"completion\": \"B\"}\n");
    TH_EXPECT(wgml_dataset_load(in_dir("pc.jsonl"), bytes_tok, &eos, &d), WGML_OK);
    if (d) {
        flatten(d, ids, tr, sizeof ids);
        TH_CHECK(wgml_dataset_kind(d) == WGML_DATA_PROMPT_COMPLETION && strcmp(ids, "Q:A|B|") == 0 && strcmp(tr, "001111") == 0,
                 "prompt and completion: \"%s\" \"%s\"", ids, tr);
        TH_CHECK(wgml_dataset_tokens(d) == 6 && wgml_dataset_trained_tokens(d) == 4, "counts %zu %zu", wgml_dataset_tokens(d),
                 wgml_dataset_trained_tokens(d));
    }
    wgml_dataset_free(d);
    wgml_dataset_options all = eos;
    all.loss_on_prompt = true;
    TH_EXPECT(wgml_dataset_load(in_dir("pc.jsonl"), bytes_tok, &all, &d), WGML_OK);
    if (d) {
        flatten(d, ids, tr, sizeof ids);
        TH_CHECK(strcmp(tr, "111111") == 0, "loss_on_prompt: \"%s\"", tr);
    }
    wgml_dataset_free(d);

    /* messages: the assistant's content and end marker learned, nothing else */
    write_file("m.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
    wgml_dataset_options plain = eos;
    plain.append_eos = false;
    TH_EXPECT(wgml_dataset_load(in_dir("m.jsonl"), bytes_tok, &plain, &d), WGML_OK);
    if (d) {
        flatten(d, ids, tr, sizeof ids);
        const char *want = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n";
        char want_tr[256];
        size_t n = strlen(want), a = strlen("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), b = a + strlen("yo<|im_end|>");
        for (size_t i = 0; i < n; i++) want_tr[i] = i >= a && i < b ? '1' : '0';
        want_tr[n] = 0;
        TH_CHECK(wgml_dataset_kind(d) == WGML_DATA_MESSAGES && strcmp(ids, want) == 0 && strcmp(tr, want_tr) == 0,
                 "messages:\n  %s\n  %s", ids, tr);
    }
    wgml_dataset_free(d);
}

/* A tokenizer whose template starts a text with <s> (id 1): every byte is its <0xNN> token
   (3 + byte), nothing else changes the text. Free text gets <s> first, not learned;
   chat renderings do not. */
static void test_template_prefix(void)
{
    char json[8192];
    int o = snprintf(json, sizeof json, "{\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
                     "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
                     "\"prepend_scheme\":\"never\",\"split\":false},\"decoder\":{\"type\":\"Metaspace\",\"replacement\":"
                     "\"\\u2581\",\"prepend_scheme\":\"never\"},\"post_processor\":{\"type\":\"TemplateProcessing\","
                     "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":"
                     "{\"<s>\":{\"id\":\"<s>\",\"ids\":[1]}}},\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,"
                     "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2");
    for (int b = 0; b < 256; b++) o += snprintf(json + o, sizeof json - (size_t)o, ",\"<0x%02X>\":%d", b, 3 + b);
    snprintf(json + o, sizeof json - (size_t)o, "},\"merges\":[]}}");
    wgml_tokenizer *tok = NULL;
    TH_EXPECT(wgml_tokenizer_parse(json, strlen(json), "t.json", &tok), WGML_OK);
    if (!tok) return;
    wgml_dataset_options eos = { .append_eos = true, .eos_id = 2, .chat_format = WGML_CHAT_CHATML };
    static const struct { const char *name, *text; uint32_t want[8]; const char *train; } cases[] = {
        { "tp.txt", "ab", { 1, 3 + 'a', 3 + 'b', 2 }, "0111" },
        { "tp.jsonl", "{\"text\": \"ab\"}\n", { 1, 3 + 'a', 3 + 'b', 2 }, "0111" },
        { "tpc.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n", { 1, 3 + 'a', 3 + 'b', 2 }, "0011" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        write_file(cases[c].name, cases[c].text);
        wgml_dataset *d = NULL;
        TH_EXPECT(wgml_dataset_load(in_dir(cases[c].name), tok, &eos, &d), WGML_OK);
        if (!d) continue;
        const uint8_t *tr;
        size_t len;
        const uint32_t *ids = wgml_dataset_example(d, 0, &tr, &len);
        bool ok = len == 4;
        for (size_t i = 0; ok && i < 4; i++) ok = ids[i] == cases[c].want[i] && tr[i] == (cases[c].train[i] == '1');
        TH_CHECK(ok, "%s: %zu ids, first %u", cases[c].name, len, len ? ids[0] : 0);
        wgml_dataset_free(d);
    }
    /* a chat rendering carries its own markers: no <s> before it */
    write_file("tm.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
               "\"content\": \"b\"}]}\n");
    wgml_dataset *d = NULL;
    TH_EXPECT(wgml_dataset_load(in_dir("tm.jsonl"), tok, &eos, &d), WGML_OK);
    if (d) {
        size_t len;
        const uint32_t *ids = wgml_dataset_example(d, 0, NULL, &len);
        TH_CHECK(len > 0 && ids[0] != 1, "a chat rendering starts with <s>");
    }
    wgml_dataset_free(d);
    wgml_tokenizer_free(tok);
}

static void test_errors(void)
{
    wgml_dataset_options o = { .chat_format = WGML_CHAT_UNKNOWN };
    static const struct { const char *text, *needle; } bad[] = {
        { "{\"text\": \"a\"}\n{\"text\": \"b\"\n", "bad.jsonl:2" },
        { "{\"text\": \"a\"}\n\n{\"prompt\": \"p\", \"completion\": \"c\"}\n", "bad.jsonl:3" },
        { "[1, 2]\n", "bad.jsonl:1" },
        { "{\"text\": 5}\n", "\"text\" must be a string" },
        { "{\"prompt\": \"p\"}\n", "must both be strings" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n", "chat_format" },
        { "{\"messages\": []}\n", "non-empty array" },
        { "{\"foo\": 1}\n", "\"text\", \"prompt\" and \"completion\", or \"messages\"" },
        { "\n\n  \n", "no records" },
        { "{\"prompt\": \"only the prompt\", \"completion\": \"\"}\n", "no token carries the loss" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("bad.jsonl", bad[i].text);
        wgml_dataset *d = (wgml_dataset *)&d;
        TH_EXPECT_ERR(wgml_dataset_load(in_dir("bad.jsonl"), bytes_tok, &o, &d), WGML_ERROR_FORMAT, bad[i].needle);
        TH_CHECK(d == NULL, "case %zu: *out not NULL after a failure", i);
    }
    wgml_dataset_options chat = { .chat_format = WGML_CHAT_CHATML };
    write_file("bad.jsonl", "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}\n");
    wgml_dataset *d;
    TH_EXPECT_ERR(wgml_dataset_load(in_dir("bad.jsonl"), bytes_tok, &chat, &d), WGML_ERROR_FORMAT, "bad.jsonl:1");
    write_file("latin1.txt", "caf\xe9");
    TH_EXPECT_ERR(wgml_dataset_load(in_dir("latin1.txt"), bytes_tok, NULL, &d), WGML_ERROR_FORMAT, "not UTF-8");
    wgml_dataset_options raw = { .allow_bytes = true };
    TH_EXPECT(wgml_dataset_load(in_dir("latin1.txt"), bytes_tok, &raw, &d), WGML_OK);
    wgml_dataset_free(d);
    write_file("empty.txt", "");
    TH_EXPECT_ERR(wgml_dataset_load(in_dir("empty.txt"), bytes_tok, NULL, &d), WGML_ERROR_FORMAT, "no tokens");
    TH_EXPECT_ERR(wgml_dataset_load(in_dir("missing.txt"), bytes_tok, NULL, &d), WGML_ERROR_IO, "missing.txt");
    TH_CHECK(mkfifo(in_dir("fifo.txt"), 0600) == 0, "mkfifo");
    TH_EXPECT_ERR(wgml_dataset_load(in_dir("fifo.txt"), bytes_tok, NULL, &d), WGML_ERROR_IO, "not a regular file");
    wgml_dataset_options big_eos = { .append_eos = true, .eos_id = 256 };
    TH_EXPECT_ERR(wgml_dataset_load(in_dir("latin1.txt"), bytes_tok, &big_eos, &d), WGML_ERROR_INVALID_ARGUMENT, "eos_id");
    TH_EXPECT_ERR(wgml_dataset_load(NULL, bytes_tok, NULL, &d), WGML_ERROR_INVALID_ARGUMENT, "NULL");
}

/* Packed: every row a window of consecutive tokens, its targets the next tokens where
   learned; a batcher set to a saved state goes on as the saved one did. */
static void test_packed(void)
{
    /* 199 distinct bytes, so a token says where it stands: byte 32 + i at position i */
    enum { LEN = 199 };
    char text[LEN + 1];
    for (int i = 0; i < LEN; i++) text[i] = (char)(32 + i);
    text[LEN] = 0;
    write_file("long.txt", text);
    wgml_dataset *d = NULL;
    TH_EXPECT(wgml_dataset_load(in_dir("long.txt"), bytes_tok, &(wgml_dataset_options){ .allow_bytes = true }, &d), WGML_OK);
    if (!d) return;
    wgml_batcher_options o = { .batch = 3, .seq_len = 16, .packed = true, .seed = 7, .part_begin = 0, .part_end = 0.5 };
    wgml_batcher *b = NULL, *c = NULL;
    TH_EXPECT(wgml_batcher_create(d, &o, &b), WGML_OK);
    wgml_batcher_stats bs = { 0 };
    TH_EXPECT(wgml_batcher_get_stats(b, &bs), WGML_OK);
    TH_CHECK(bs.items == 100 && bs.learned == 99 && bs.cut == 0, "part of %zu tokens (half of 199, to the nearest), %zu "
             "learned targets (99), %zu cut", bs.items, bs.learned, bs.cut);
    uint32_t ids[48], tg[48], ids2[48], tg2[48];
    bool windows = true;
    wgml_batcher_state st;
    for (int k = 0; k < 20; k++) {
        if (k == 10) {
            TH_EXPECT(wgml_batcher_get_state(b, &st), WGML_OK);
            TH_EXPECT(wgml_batcher_create(d, &o, &c), WGML_OK);
            TH_EXPECT(wgml_batcher_set_state(c, &st), WGML_OK);
        }
        TH_EXPECT(wgml_batcher_next(b, ids, tg), WGML_OK);
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < 16; i++) {
                const uint32_t *in = ids + r * 16, *t = tg + r * 16;
                windows &= t[i] == in[i] + 1 && (i == 0 || in[i] == t[i - 1]);
                windows &= t[i] - 32 < 100;   /* inputs and targets within the part */
            }
        if (k >= 10 && c) {
            TH_EXPECT(wgml_batcher_next(c, ids2, tg2), WGML_OK);
            TH_CHECK(memcmp(ids, ids2, sizeof ids) == 0 && memcmp(tg, tg2, sizeof tg) == 0, "batch %d differs after the state was "
                     "restored", k);
        }
    }
    TH_CHECK(windows, "a packed row is not a window of consecutive tokens with its next tokens as targets");
    wgml_batcher_free(b);
    wgml_batcher_free(c);
    /* sequential: windows one after another; every target of the part exactly once */
    wgml_batcher_options so = { .batch = 2, .seq_len = 16, .packed = true, .sequential = true, .part_begin = 0.5, .part_end = 1 };
    TH_EXPECT(wgml_batcher_create(d, &so, &b), WGML_OK);
    wgml_batcher_stats ps = { 0 };
    TH_EXPECT(wgml_batcher_get_stats(b, &ps), WGML_OK);
    size_t part = ps.items, first = LEN - part, targets = 0, k = 0;
    bool ordered = true;
    wgml_batcher_state ss = { 0 };
    for (; b && k < 100; k++) {
        TH_EXPECT(wgml_batcher_get_state(b, &ss), WGML_OK);
        if (ss.epoch) break;
        uint32_t si[32], st2[32];
        TH_EXPECT(wgml_batcher_next(b, si, st2), WGML_OK);
        for (size_t i = 0; i < 32; i++) {
            if (st2[i] == UINT32_MAX) continue;
            size_t at = first + k * 32 + i;   /* the input's place in the text */
            ordered &= si[i] == (uint32_t)(unsigned char)text[at] && st2[i] == (uint32_t)(unsigned char)text[at + 1];
            targets++;
        }
    }
    TH_CHECK(ordered && targets == part - 1, "sequential windows: %zu targets of %zu, in order %d", targets, part - 1, ordered);
    wgml_batcher_free(b);
    o.part_begin = 0.99;   /* 4 tokens: fewer than a sequence */
    o.part_end = 1;
    TH_EXPECT_ERR(wgml_batcher_create(d, &o, &b), WGML_ERROR_SHAPE, "seq_len");
    /* read in order, a part shorter than a window is one partial window */
    so = (wgml_batcher_options){ .batch = 1, .seq_len = 16, .packed = true, .sequential = true, .part_begin = 0.99, .part_end = 1 };
    TH_EXPECT(wgml_batcher_create(d, &so, &b), WGML_OK);
    TH_EXPECT(wgml_batcher_get_stats(b, &ps), WGML_OK);
    TH_CHECK(ps.items == 2 && ps.learned == 1, "a 2-token part read in order: %zu tokens, %zu learned (1)", ps.items, ps.learned);
    wgml_batcher_free(b);
    o.part_end = 1.5;
    TH_EXPECT_ERR(wgml_batcher_create(d, &o, &b), WGML_ERROR_INVALID_ARGUMENT, "part");
    o = (wgml_batcher_options){ .batch = 0, .seq_len = 4 };
    TH_EXPECT_ERR(wgml_batcher_create(d, &o, &b), WGML_ERROR_INVALID_ARGUMENT, "batch");
    wgml_dataset_free(d);
}

/* The example a padded row holds: its ids cut to T (or padded with its last id) and its
   targets the next ids where learned, UINT32_MAX elsewhere; -1 when none matches. */
static int row_example(const wgml_dataset *d, const uint32_t *in, const uint32_t *t, size_t T)
{
    for (size_t e = 0; e < wgml_dataset_examples(d); e++) {
        const uint8_t *tr;
        size_t len;
        const uint32_t *p = wgml_dataset_example(d, e, &tr, &len);
        bool same = true;
        for (size_t i = 0; i < T && same; i++) {
            uint32_t want_in = i < len ? p[i] : p[len - 1];
            uint32_t want_t = i + 1 < len && tr[i + 1] ? p[i + 1] : UINT32_MAX;
            same = in[i] == want_in && t[i] == want_t;
        }
        if (same) return (int)e;
    }
    return -1;
}

/* Padded: each row one example, cut or padded with ignored targets; every example once
   per epoch, in a new order each epoch; a saved state across an epoch's end; parts. */
static void test_padded(void)
{
    char jsonl[2048] = "";
    for (int i = 0; i < 10; i++) {
        char line[128];
        /* example i: prompt "P", then i + 1 times the letter 'a' + i (cut at seq_len 6 from i = 4) */
        char letters[16];
        memset(letters, 'a' + i, (size_t)i + 1);
        letters[i + 1] = 0;
        snprintf(line, sizeof line, "{\"prompt\": \"P\", \"completion\": \"%s\"}\n", letters);
        strcat(jsonl, line);
    }
    write_file("ex.jsonl", jsonl);
    wgml_dataset_options eos = { .append_eos = true, .eos_id = 0 };
    wgml_dataset *d = NULL;
    TH_EXPECT(wgml_dataset_load(in_dir("ex.jsonl"), bytes_tok, &eos, &d), WGML_OK);
    if (!d) return;
    wgml_batcher_options o = { .batch = 5, .seq_len = 6, .seed = 3 };
    wgml_batcher *b = NULL, *c = NULL;
    TH_EXPECT(wgml_batcher_create(d, &o, &b), WGML_OK);
    /* example i holds i + 3 tokens ("P", the letters, EOS) and i + 2 learned targets; 7
       tokens fit: examples 5 - 9 are cut, keeping 6 learned targets each */
    wgml_batcher_stats bs = { 0 };
    TH_EXPECT(wgml_batcher_get_stats(b, &bs), WGML_OK);
    TH_CHECK(bs.items == 10 && bs.learned == 50 && bs.cut == 5 && bs.cut_empty == 0, "padded stats: %zu examples (10), %zu "
             "learned targets (50), %zu cut (5), %zu of them with nothing learned (0)", bs.items, bs.learned, bs.cut, bs.cut_empty);
    uint32_t ids[30], tg[30];
    int seen[2][10] = { { 0 } }, order[2][10];
    for (int k = 0; k < 4; k++) {   /* 20 rows: two epochs of 10 */
        if (k == 1) {   /* a mid-epoch save: the next three batches, across the epoch's end, again */
            wgml_batcher_state st;
            TH_EXPECT(wgml_batcher_get_state(b, &st), WGML_OK);
            TH_EXPECT(wgml_batcher_create(d, &o, &c), WGML_OK);
            TH_EXPECT(wgml_batcher_set_state(c, &st), WGML_OK);
        }
        TH_EXPECT(wgml_batcher_next(b, ids, tg), WGML_OK);
        if (k >= 1 && c) {
            uint32_t i2[30], t2[30];
            TH_EXPECT(wgml_batcher_next(c, i2, t2), WGML_OK);
            TH_CHECK(memcmp(ids, i2, sizeof ids) == 0 && memcmp(tg, t2, sizeof tg) == 0, "padded batch %d differs after the "
                     "state was restored", k);
        }
        for (int r = 0; r < 5; r++) {
            int e = row_example(d, ids + r * 6, tg + r * 6, 6);
            TH_CHECK(e >= 0, "batch %d row %d holds no example as it should", k, r);
            if (e >= 0) seen[k / 2][e]++;
            order[k / 2][(k % 2) * 5 + r] = e;
        }
    }
    for (int ep = 0; ep < 2; ep++)
        for (int x = 0; x < 10; x++) TH_CHECK(seen[ep][x] == 1, "epoch %d saw example %d %d times", ep, x, seen[ep][x]);
    TH_CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0, "the second epoch repeats the first one's order");
    wgml_batcher_state past = { .position = 11 };
    TH_EXPECT_ERR(wgml_batcher_set_state(b, &past), WGML_ERROR_INVALID_ARGUMENT, "position");
    wgml_batcher_free(b);
    wgml_batcher_free(c);
    /* sequential: the examples in file order, once */
    wgml_batcher_options so = { .batch = 4, .seq_len = 16, .sequential = true };
    TH_EXPECT(wgml_batcher_create(d, &so, &b), WGML_OK);
    int next = 0;
    for (int k = 0; b && k < 5; k++) {
        uint32_t si[64], st2[64];
        TH_EXPECT(wgml_batcher_next(b, si, st2), WGML_OK);
        for (int r = 0; r < 4; r++) {
            int e = row_example(d, si + r * 16, st2 + r * 16, 16);
            bool empty = true;
            for (int i = 0; i < 16; i++) empty &= st2[r * 16 + i] == UINT32_MAX;
            if (next < 10) TH_CHECK(e == next, "sequential row %d holds example %d, want %d", k * 4 + r, e, next);
            else TH_CHECK(empty, "a row past the last example counts");
            next++;
        }
    }
    wgml_batcher_free(b);
    /* parts of the examples: [0, 0.5) holds examples 0 - 4, [0.5, 1) examples 5 - 9 */
    o = (wgml_batcher_options){ .batch = 5, .seq_len = 16, .part_begin = 0, .part_end = 0.5 };
    wgml_batcher_options o2 = o;
    o2.part_begin = 0.5;
    o2.part_end = 1;
    TH_EXPECT(wgml_batcher_create(d, &o, &b), WGML_OK);
    TH_EXPECT(wgml_batcher_create(d, &o2, &c), WGML_OK);
    uint32_t i1[80], t1[80], i2[80], t2[80];
    TH_EXPECT(wgml_batcher_next(b, i1, t1), WGML_OK);
    TH_EXPECT(wgml_batcher_next(c, i2, t2), WGML_OK);
    for (int r = 0; r < 5; r++) {
        int e1 = row_example(d, i1 + r * 16, t1 + r * 16, 16), e2 = row_example(d, i2 + r * 16, t2 + r * 16, 16);
        TH_CHECK(e1 >= 0 && e1 < 5 && e2 >= 5, "row %d: example %d in the first part, %d in the second", r, e1, e2);
    }
    wgml_batcher_free(b);
    wgml_batcher_free(c);
    wgml_dataset_free(d);
    /* a prompt longer than the window leaves nothing to learn: refused, saying why */
    write_file("long_prompt.jsonl", "{\"prompt\": \"PPPPPPPPPP\", \"completion\": \"x\"}\n");
    TH_EXPECT(wgml_dataset_load(in_dir("long_prompt.jsonl"), bytes_tok, &eos, &d), WGML_OK);
    if (!d) return;
    o = (wgml_batcher_options){ .batch = 1, .seq_len = 4 };
    TH_EXPECT_ERR(wgml_batcher_create(d, &o, &b), WGML_ERROR_SHAPE, "seq_len");
    o.seq_len = 10;   /* 12 tokens (10 of prompt, "x", EOS): 11 fit, the last target "x" */
    TH_EXPECT(wgml_batcher_create(d, &o, &b), WGML_OK);
    TH_EXPECT(wgml_batcher_get_stats(b, &bs), WGML_OK);
    TH_CHECK(bs.learned == 1 && bs.cut == 1 && bs.cut_empty == 0, "a long prompt: %zu learned (1: the completion, not its EOS), "
             "%zu cut (1)", bs.learned, bs.cut);
    wgml_batcher_free(b);
    wgml_dataset_free(d);
}

static void teardown(void)
{
    const char *files[] = { "plain.txt", "t.jsonl", "pc.jsonl", "m.jsonl", "bad.jsonl", "latin1.txt", "empty.txt", "fifo.txt",
                            "long.txt", "ex.jsonl", "long_prompt.jsonl", "tp.txt", "tp.jsonl", "tpc.jsonl", "tm.jsonl" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(in_dir(files[i]));
    TH_CHECK(rmdir(dir) == 0, "rmdir %s", dir);
    wgml_tokenizer_free(bytes_tok);
}

static const th_case cases[] = {
    { "setup", setup },
    { "kinds", test_kinds },
    { "template prefix", test_template_prefix },
    { "errors", test_errors },
    { "packed", test_packed },
    { "padded", test_padded },
    { "teardown", teardown },
};
TH_MAIN(cases)
