/* The files of a model folder, for the commands that read one: the model with an
   optional LoRA adapter, and its tokenizer. */
#ifndef WGML_TOOLS_MODEL_FILES_H
#define WGML_TOOLS_MODEL_FILES_H

#include "wgml.h"

#include <stdbool.h>
#include <stddef.h>

/* A context on the chosen adapter, its products and attention at precision (--precision:
   "f32", "f16" or "f16x3"; NULL: f32), and an engine on it. 0, or -1 after a message that
   starts with who (then nothing is left allocated). */
int model_device(const char *who, const char *precision, wgml_context **ctx, wgml_engine **eng);

/* The folder of model: model itself when it is a folder, else the folder of the file. */
const char *model_folder(const char *model, char *dir, size_t size);

/* How the weights are stored, from the --dtype (auto: the checkpoint's packed or 16-bit
   dtype; f32) and --quantize (NULL or "": none; q8, q4) flags. 0, or -1 after a message
   that starts with who. */
int model_weights(const char *who, const char *dtype, const char *quantize, wgml_weights *out);

/* The help of --dtype and --quantize. */
#define MODEL_DTYPE_HELP "weights on the GPU: auto (as the checkpoint stores them: bf16, f16, MLX 4/8-bit, GGUF " \
                         "Q8_0/Q4_0/Q4_K/Q6_K) or f32"
#define MODEL_QUANTIZE_HELP "quantise the f32 / 16-bit matrices at load: q8 or q4 (MLX's affine scheme, groups of 64)"

/* The dtypes of the model's matrices, e.g. "bf16", "affine 4-bit", "q4_k and q6_k". */
const char *model_weights_name(const wgml_model *m, char *buf, size_t size);

/* Loads model (a folder, a .safetensors or a .gguf file) with its weights stored as
   weights says and, when adapter is not NULL, the PEFT adapter in that folder: merged
   into the weights when merge (*lora then NULL; the weights must be f32), else attached
   unmerged (*lora, freed with the model). Returns 0, or -1 after a message on stderr
   that starts with who. */
int model_open(const char *who, wgml_context *ctx, wgml_engine *eng, const char *model, wgml_weights weights,
               const char *adapter, bool merge, wgml_model **m, wgml_lora **lora);

/* The tokenizer of a .gguf file; else tokenizer.json in the folder of model, else the
   byte tokenizer when the vocabulary is 256 (a checkpoint of wgml train without
   --tokenizer). Returns 0, or -1 after a message
   on stderr that starts with who. */
int model_tokenizer(const char *who, const char *model, const wgml_model_config *cfg, wgml_tokenizer **tok);

/* What chat and serve open: the device, the model (its weights as weights says, the
   adapter unmerged), its tokenizer, and its chat format (chat_template by name, else the
   folder's template; WGML_CHAT_UNKNOWN when it has none wgml recognises) with the
   tokenizer's BOS and EOS texts. */
typedef struct model_chat {
    wgml_context *ctx;
    wgml_engine *eng;
    wgml_model *m;
    wgml_tokenizer *tok;
    wgml_tokenizer_config tcfg;     /* holds the strings chat_opts points to */
    wgml_chat_format chat;
    wgml_chat_options chat_opts;
} model_chat;
/* 0, or -1 after a message that starts with who (mc then holds nothing: no close needed). */
int model_chat_open(const char *who, const char *model, const char *precision, wgml_weights weights, const char *adapter,
                    const char *chat_template, model_chat *mc);
void model_chat_close(model_chat *mc);

/* The positions of a --context flag: requested, or 0 for max_position_embeddings up to
   4096. 0, or -1 after a message when requested is beyond max_position_embeddings. */
int model_context(const char *who, const wgml_model_config *cfg, int requested, uint32_t *out);

/* The options that read training or evaluation data for this model: the chat format
   (chat_template by name, else recognised from the folder's tokenizer_config.json or
   chat_template.jinja; unknown is an error only for data with messages), the BOS and EOS
   texts, EOS after every example (config.json's first eos_token_id, else the tokenizer's
   eos_token). *tcfg holds the strings dopt points to: clear it after use. 0, or -1 after
   a message. */
int model_data_options(const char *who, const char *model, const wgml_model_config *cfg, const wgml_tokenizer *tok,
                       const char *chat_template, bool loss_on_prompt, wgml_tokenizer_config *tcfg, wgml_dataset_options *dopt);

#endif
