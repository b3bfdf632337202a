/* The tokenizer that goes with a model folder, for the commands that read one. */
#ifndef WGML_TOOLS_MODEL_TOKENIZER_H
#define WGML_TOOLS_MODEL_TOKENIZER_H

#include "wgml.h"

/* tokenizer.json in the folder of model (model itself when it is a folder), else the byte
   tokenizer when the vocabulary is 256 (a checkpoint of wgml train without --tokenizer).
   Returns 0, or -1 after a message on stderr that starts with who. */
int model_tokenizer(const char *who, const char *model, const wgml_model_config *cfg, wgml_tokenizer **tok);

#endif
