/* wgml merge: folds a LoRA adapter (PEFT's files, e.g. wgml finetune's output) into its
   base model and writes a whole model folder that any Llama loader reads without PEFT:
   config.json, model.safetensors (in the base's dtype unless --dtype says otherwise) and
   the base's tokenizer files. */
#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "model_files.h"
#include "wgml.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct merge_opts { const char *model, *adapter, *out, *dtype; int overwrite; } merge_opts;

static const cli_flag merge_flags[] = {
    { "--model", CLI_STRING, offsetof(merge_opts, model), "the base model folder the adapter was trained on" },
    { "--adapter", CLI_STRING, offsetof(merge_opts, adapter), "the adapter folder (adapter_config.json, "
      "adapter_model.safetensors)" },
    { "--out", CLI_STRING, offsetof(merge_opts, out), "output folder: config.json, model.safetensors, the tokenizer files" },
    { "--dtype", CLI_STRING, offsetof(merge_opts, dtype), "weights in the file: auto (the base's), f32, f16 or bf16" },
    { "--overwrite", CLI_BOOL, offsetof(merge_opts, overwrite), "replace a model already in --out" },
};

/* The files that go with a model folder besides its weights and config.json. */
static const char *const side_files[] = { "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                          "special_tokens_map.json", "generation_config.json" };

int cmd_merge(int argc, char **argv)
{
    const char *who = "wgml merge";
    merge_opts o = { .dtype = "auto" };
    int pr = cli_parse(argc, argv, merge_flags, sizeof merge_flags / sizeof merge_flags[0], &o,
                       "wgml merge --model DIR --adapter DIR --out DIR [options]",
                       "Merges a LoRA adapter into its base model and writes a whole model folder.");
    if (pr <= 0) return -pr;
    if (!o.model || !o.adapter || !o.out) {
        fprintf(stderr, "%s: --model, --adapter and --out are required (see --help)\n", who);
        return 2;
    }
    static const char *const dtype_names[] = { "auto", "f32", "f16", "bf16" };
    int dt = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(o.dtype, dtype_names[i])) dt = i;
    if (dt < 0) {
        fprintf(stderr, "%s: --dtype %s is not one of auto, f32, f16, bf16\n", who, o.dtype);
        return 2;
    }
    int rc = 1;
    bool made = false, prepared = false;
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    wgml_model *m = NULL;
    if (model_device(who, NULL, &ctx, &eng)   /* merging computes nothing to speak of: f32 */ != 0) return 1;
    if (ckpt_same_folder(o.out, o.adapter)) {
        fprintf(stderr, "%s: --out %s is the adapter's folder: write elsewhere\n", who, o.out);
        goto done;
    }
    /* merged before --out is touched: a merge that fails leaves an old model there */
    double t0 = cli_now();
    if (model_open(who, ctx, eng, o.model, WGML_WEIGHTS_F32, o.adapter, true, &m, NULL) != 0) goto done;   /* merging needs f32 */
    if (ckpt_prepare_out(who, o.out, &(out_options){ .overwrite = o.overwrite, .input = o.model }, &made) != 0) goto done;
    prepared = true;
    static const wgml_dtype dtypes[] = { WGML_F32, WGML_F32, WGML_F16, WGML_BF16 };
    wgml_dtype dtype = dt == 0 ? wgml_model_file_dtype(m) : dtypes[dt];
    if (wgml_model_save_with(m, o.out, &(wgml_model_save_options){ .dtype = dtype }) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
        goto done;
    }
    char dir[PATH_MAX], from[PATH_MAX], to[PATH_MAX];
    model_folder(o.model, dir, sizeof dir);
    int copied = 0;
    for (size_t i = 0; i < sizeof side_files / sizeof side_files[0]; i++) {
        struct stat st;
        if (stat(cli_fmt_path(from, sizeof from, dir, side_files[i]), &st) != 0) continue;
        if (cli_copy_file(who, from, cli_fmt_path(to, sizeof to, o.out, side_files[i])) != 0) goto done;
        copied++;
    }
    printf("merged %s into %s: %llu parameters, %s, written to %s (config.json, model.safetensors%s) in %s\n", o.adapter, o.model,
           (unsigned long long)wgml_model_numel(m), wgml_dtype_name(dtype), o.out, copied ? ", the tokenizer files" : "",
           cli_duration(cli_now() - t0));
    rc = 0;
done:
    if (rc != 0 && prepared) {   /* what this run wrote: the folder held none of these files */
        char p[PATH_MAX];
        unlink(cli_fmt_path(p, sizeof p, o.out, "config.json"));
        unlink(cli_fmt_path(p, sizeof p, o.out, "model.safetensors"));
        for (size_t i = 0; i < sizeof side_files / sizeof side_files[0]; i++)
            unlink(cli_fmt_path(p, sizeof p, o.out, side_files[i]));
        if (made) rmdir(o.out);
    }
    wgml_model_destroy(m);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    return rc;
}
