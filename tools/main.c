/* wgml: the command-line program. Each subcommand lives in its own tools/cmd_<name>.c. */
#include "commands.h"

#include <stdio.h>
#include <string.h>

static const struct { const char *name; int (*run)(int, char **); const char *help; } commands[] = {
    { "info", cmd_info, "show the chosen adapter, its limits and features, and run a self-check" },
    { "train", cmd_train, "train a Llama-style model on a text file (byte tokens); writes a checkpoint and a loss curve" },
    { "finetune", cmd_finetune, "adapt a pretrained model to a text or JSONL file: a LoRA adapter (PEFT's format) or every weight" },
    { "eval", cmd_eval, "the loss, perplexity and bits per byte of a model (with an adapter) on a text or JSONL file" },
    { "merge", cmd_merge, "merge a LoRA adapter into its base model and write a whole model folder" },
    { "generate", cmd_generate, "generate text from a checkpoint (wgml's own, a Hugging Face Llama, Mistral or Qwen folder, or a GGUF file)" },
    { "chat", cmd_chat, "talk with a model through its chat template (the KV cache kept across turns)" },
    { "serve", cmd_serve, "serve a model over HTTP with OpenAI's API (completions, chat, streaming; requests decoded together)" },
    { "logits", cmd_logits, "write the token ids and logits of a text (for comparisons with other implementations)" },
    { "bench", cmd_bench, "time every op on representative shapes (see tools/cmd_bench.c)" },
};

static int usage(FILE *f)
{
    fprintf(f, "usage: wgml <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nenvironment: WGML_ADAPTER=<substring> and WGML_BACKEND=<vulkan|metal|d3d12|...> choose the adapter\n");
    return f == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) return usage(stdout);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "wgml: unknown command \"%s\"\n\n", argv[1]);
    return usage(stderr);
}
