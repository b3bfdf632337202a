/* Chat templates: each format rendered byte for byte against the text its Jinja template
   gives (expected strings written from the template definitions, with trim_blocks and
   lstrip_blocks as transformers sets them), the assistant segments, the recognition of
   template texts, and tokenizer_config.json / chat_template.jinja reading. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const wgml_chat_message conv[] = {
    { "system", "Be brief." }, { "user", " Hi there \n" }, { "assistant", "Hello!" }, { "user", "Bye" },
};

typedef struct expect {
    wgml_chat_format f;
    bool with_system, generation;
    const char *text;
    const char *assistant;     /* the assistant segments, joined */
} expect;

static const expect cases[] = {
    { WGML_CHAT_SMOLLM2, true, false,
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi there \n<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
      "<|im_start|>user\nBye<|im_end|>\n", "Hello!<|im_end|>" },
    { WGML_CHAT_SMOLLM2, false, true,
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n Hi "
      "there \n<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
      "Hello!<|im_end|>" },
    { WGML_CHAT_QWEN2, false, false,
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n Hi "
      "there \n<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n", "Hello!<|im_end|>" },
    { WGML_CHAT_CHATML, false, true,
      "<|im_start|>user\n Hi there \n<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
      "<|im_start|>assistant\n", "Hello!<|im_end|>" },
    { WGML_CHAT_LLAMA3, true, false,
      "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there"
      "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye"
      "<|eot_id|>", "Hello!<|eot_id|>" },
    { WGML_CHAT_LLAMA3, false, true,
      "<s><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!"
      "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
      "Hello!<|eot_id|>" },
    { WGML_CHAT_LLAMA31, true, true,
      "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief."
      "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
      "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
      "Hello!<|eot_id|>" },
    { WGML_CHAT_LLAMA31, false, false,
      "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
      "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
      "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>", "Hello!<|eot_id|>" },
    { WGML_CHAT_ZEPHYR, true, true,
      "<|system|>\nBe brief.</s>\n<|user|>\n Hi there \n</s>\n<|assistant|>\nHello!</s>\n<|user|>\nBye</s>\n<|assistant|>\n",
      "Hello!</s>" },
    { WGML_CHAT_ZEPHYR, false, false, "<|user|>\n Hi there \n</s>\n<|assistant|>\nHello!</s>\n<|user|>\nBye</s>\n", "Hello!</s>" },
};

static void test_render(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const expect *x = &cases[i];
        wgml_chat_options o = { .add_generation_prompt = x->generation, .bos_token = "<s>", .eos_token = "</s>" };
        wgml_chat *c = NULL;
        const wgml_chat_message *m = x->with_system ? conv : conv + 1;
        size_t n = x->with_system ? 4 : 3;
        TH_EXPECT(wgml_chat_render(x->f, m, n, &o, &c), WGML_OK);
        if (!c) continue;
        size_t len;
        const char *text = wgml_chat_text(c, &len);
        TH_CHECK(len == strlen(x->text) && strcmp(text, x->text) == 0, "%s (system %d, prompt %d):\n  got  %s\n  want %s",
                 wgml_chat_format_name(x->f), x->with_system, x->generation, text, x->text);
        /* the segments tile the text; the assistant's, joined, are the expected ones */
        char joined[256] = "";
        size_t at = 0;
        bool tiled = true;
        for (size_t k = 0; k < wgml_chat_segment_count(c); k++) {
            size_t sl;
            bool a;
            const char *s = wgml_chat_segment(c, k, &sl, &a);
            tiled &= s == text + at;
            at += sl;
            if (a) strncat(joined, s, sl < sizeof joined - strlen(joined) - 1 ? sl : sizeof joined - strlen(joined) - 1);
            if (k) {
                bool prev;
                wgml_chat_segment(c, k - 1, NULL, &prev);
                tiled &= prev != a;
            }
        }
        TH_CHECK(tiled && at == len, "%s: the segments do not tile the text", wgml_chat_format_name(x->f));
        TH_CHECK(strcmp(joined, x->assistant) == 0, "%s: assistant segments \"%s\", want \"%s\"", wgml_chat_format_name(x->f),
                 joined, x->assistant);
        wgml_chat_free(c);
    }
}

/* What the templates do with no messages (Qwen2 still writes its system message; SmolLM2
   and Zephyr write nothing, Zephyr not even the generation prompt), trimming of Unicode
   spaces (llama3's Jinja trim is Python's strip), and the refusals. */
static void test_edges(void)
{
    wgml_chat_options gen = { .add_generation_prompt = true, .bos_token = "<s>", .eos_token = "</s>" };
    static const struct { wgml_chat_format f; const char *want; } empty[] = {
        { WGML_CHAT_SMOLLM2, "<|im_start|>assistant\n" },
        { WGML_CHAT_QWEN2, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                           "<|im_start|>assistant\n" },
        { WGML_CHAT_LLAMA3, "<|start_header_id|>assistant<|end_header_id|>\n\n" },
        { WGML_CHAT_ZEPHYR, "" },
    };
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        wgml_chat *c = NULL;
        TH_EXPECT(wgml_chat_render(empty[i].f, NULL, 0, &gen, &c), WGML_OK);
        TH_CHECK(c && strcmp(wgml_chat_text(c, NULL), empty[i].want) == 0, "%s with no messages: \"%s\"",
                 wgml_chat_format_name(empty[i].f), c ? wgml_chat_text(c, NULL) : "");
        wgml_chat_free(c);
    }
    /* U+3000 and U+00A0 around the content, tabs and newlines: all stripped; inner kept */
    wgml_chat_message m[] = { { "user", "\xE3\x80\x80\t a\xC2\xA0" "b \n\xC2\xA0" } };
    wgml_chat *c = NULL;
    TH_EXPECT(wgml_chat_render(WGML_CHAT_LLAMA3, m, 1, &gen, &c), WGML_OK);
    const char *want = "<s><|start_header_id|>user<|end_header_id|>\n\na\xC2\xA0" "b<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n";
    TH_CHECK(c && strcmp(wgml_chat_text(c, NULL), want) == 0, "llama3 trim: \"%s\"", c ? wgml_chat_text(c, NULL) : "");
    wgml_chat_free(c);

    wgml_chat_message tool[] = { { "tool", "x" } }, sys2[] = { { "user", "a" }, { "system", "b" } }, nul[] = { { "user", NULL } };
    c = (wgml_chat *)&c;
    TH_EXPECT_ERR(wgml_chat_render(WGML_CHAT_CHATML, tool, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, "tool");
    TH_CHECK(c == NULL, "*out not NULL after a failure");
    TH_EXPECT_ERR(wgml_chat_render(WGML_CHAT_LLAMA31, sys2, 2, &gen, &c), WGML_ERROR_INVALID_ARGUMENT, "system");
    TH_EXPECT_ERR(wgml_chat_render(WGML_CHAT_CHATML, nul, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    TH_EXPECT_ERR(wgml_chat_render(WGML_CHAT_ZEPHYR, conv, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, "eos_token");
    TH_EXPECT_ERR(wgml_chat_render(WGML_CHAT_LLAMA3, conv, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, "bos_token");
    TH_EXPECT_ERR(wgml_chat_render((wgml_chat_format)77, conv, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, "wgml_chat_format");
    TH_EXPECT_ERR(wgml_chat_render(WGML_CHAT_CHATML, NULL, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    wgml_chat_free(NULL);
}

static void test_detect_and_names(void)
{
    static const struct { const char *text; wgml_chat_format f; } texts[] = {
        { "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a "
          "helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] "
          "+ '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}", WGML_CHAT_SMOLLM2 },
        { "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}",
          WGML_CHAT_QWEN2 },
        { "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}",
          WGML_CHAT_CHATML },
        { "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] "
          "| trim + '<|eot_id|>' }}{% endfor %}", WGML_CHAT_LLAMA3 },
        { "{{- \"Cutting Knowledge Date: December 2023\\n\" }}<|start_header_id|><|eot_id|>", WGML_CHAT_LLAMA31 },
        { "{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}{% elif message['role'] == "
          "'assistant' %}{{ '<|assistant|>\\n' + message['content'] + eos_token }}{% endif %}", WGML_CHAT_ZEPHYR },
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        wgml_chat_format f = WGML_CHAT_UNKNOWN;
        TH_EXPECT(wgml_chat_format_detect(texts[i].text, &f), WGML_OK);
        TH_CHECK(f == texts[i].f, "template %zu detected as %s, not %s", i, wgml_chat_format_name(f),
                 wgml_chat_format_name(texts[i].f));
        wgml_chat_format g = WGML_CHAT_UNKNOWN;
        TH_EXPECT(wgml_chat_format_from_name(wgml_chat_format_name(texts[i].f), &g), WGML_OK);
        TH_CHECK(g == texts[i].f, "the name of %s does not come back", wgml_chat_format_name(texts[i].f));
    }
    wgml_chat_format f;
    TH_EXPECT_ERR(wgml_chat_format_detect("[INST] {{ message['content'] }} [/INST]", &f), WGML_ERROR_UNSUPPORTED, "none of");
    TH_EXPECT_ERR(wgml_chat_format_detect("<|im_start|>{{ '<think>' }}", &f), WGML_ERROR_UNSUPPORTED, "<think>");
    TH_EXPECT_ERR(wgml_chat_format_from_name("vicuna", &f), WGML_ERROR_UNSUPPORTED, "vicuna");
    TH_EXPECT_ERR(wgml_chat_format_detect(NULL, &f), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    TH_CHECK(strcmp(wgml_chat_format_name(WGML_CHAT_UNKNOWN), "unknown") == 0, "the name of UNKNOWN");
}

static char dir[64];

static void write_file(const char *name, const char *text)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    TH_CHECK(f != NULL, "cannot write %s", p);
    if (f) { fputs(text, f); fclose(f); }
}

static void test_tokenizer_config(void)
{
    snprintf(dir, sizeof dir, "/tmp/wgml_test_chat_XXXXXX");
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    wgml_tokenizer_config c;
    TH_EXPECT(wgml_tokenizer_config_load(dir, &c), WGML_OK);   /* neither file: all NULL */
    TH_CHECK(!c.chat_template && !c.bos_token && !c.eos_token, "an empty folder gave a config");
    write_file("tokenizer_config.json", "{\"chat_template\": \"<|im_start|>{{x}}\", \"bos_token\": \"<s>\", "
               "\"eos_token\": {\"content\": \"</s>\", \"lstrip\": false}, \"model_max_length\": 2048}");
    TH_EXPECT(wgml_tokenizer_config_load(dir, &c), WGML_OK);
    TH_CHECK(c.chat_template && strcmp(c.chat_template, "<|im_start|>{{x}}") == 0 && c.bos_token && strcmp(c.bos_token, "<s>") == 0 &&
             c.eos_token && strcmp(c.eos_token, "</s>") == 0, "tokenizer_config.json read wrong");
    wgml_tokenizer_config_clear(&c);
    write_file("tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", "
               "\"template\": \"D\"}]}");
    TH_EXPECT(wgml_tokenizer_config_load(dir, &c), WGML_OK);
    TH_CHECK(c.chat_template && strcmp(c.chat_template, "D") == 0 && !c.bos_token, "the default of a template list");
    wgml_tokenizer_config_clear(&c);
    write_file("chat_template.jinja", "J{{ messages }}");
    TH_EXPECT(wgml_tokenizer_config_load(dir, &c), WGML_OK);
    TH_CHECK(c.chat_template && strcmp(c.chat_template, "J{{ messages }}") == 0, "chat_template.jinja does not win");
    wgml_tokenizer_config_clear(&c);
    static const struct { const char *json, *needle; } bad[] = {
        { "[1]", "object" }, { "{\"chat_template\": 3}", "chat_template" },
        { "{\"chat_template\": [{\"name\": \"x\", \"template\": \"y\"}]}", "default" }, { "{\"eos_token\": 2}", "eos_token" },
        { "{\"bos_token\": {\"content\": 1}}", "bos_token" }, { "{\"chat_template\": ", "JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("tokenizer_config.json", bad[i].json);
        memset(&c, 0xAB, sizeof c);
        TH_EXPECT_ERR(wgml_tokenizer_config_load(dir, &c), WGML_ERROR_FORMAT, bad[i].needle);
        TH_CHECK(!c.chat_template && !c.bos_token && !c.eos_token, "a failed load left fields set");
    }
    char p[128];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    unlink(p);
    TH_CHECK(mkfifo(p, 0600) == 0, "mkfifo");
    TH_EXPECT_ERR(wgml_tokenizer_config_load(dir, &c), WGML_ERROR_IO, "not a regular file");
    unlink(p);
    TH_EXPECT_ERR(wgml_tokenizer_config_load(NULL, &c), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    snprintf(p, sizeof p, "%s/chat_template.jinja", dir);
    unlink(p);
    rmdir(dir);
}

static const th_case tcases[] = {
    { "render", test_render },
    { "edges", test_edges },
    { "detect_and_names", test_detect_and_names },
    { "tokenizer_config", test_tokenizer_config },
};
TH_MAIN(tcases)
