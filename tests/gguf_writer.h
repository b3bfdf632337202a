/* A GGUF writer for the tests: metadata pairs and tensors collected in memory, then
   written as one file (version 3, the alignment given). Written from the format's
   description in include/wgml.h, independently of the reader. */
#ifndef WGML_TESTS_GGUF_WRITER_H
#define WGML_TESTS_GGUF_WRITER_H

#include "wgml.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gguf_writer gguf_writer;

gguf_writer *gw_new(void);
void gw_free(gguf_writer *w);
/* metadata pairs, in the order added */
void gw_str(gguf_writer *w, const char *key, const char *value);
void gw_u32(gguf_writer *w, const char *key, uint32_t value);
void gw_bool(gguf_writer *w, const char *key, bool value);
void gw_f32(gguf_writer *w, const char *key, float value);
void gw_str_array(gguf_writer *w, const char *key, const char *const *items, size_t n);
void gw_i32_array(gguf_writer *w, const char *key, const int32_t *items, size_t n);
void gw_f32_array(gguf_writer *w, const char *key, const float *items, size_t n);
/* a tensor: shape innermost first; nbytes of data copied */
void gw_tensor(gguf_writer *w, const char *name, wgml_ggml_type type, uint32_t ndim, const uint64_t *shape, const void *data,
               size_t nbytes);
/* the file's bytes (malloc'd, *size of them), or written to path (true on success) */
uint8_t *gw_bytes(const gguf_writer *w, uint32_t alignment, size_t *size);
bool gw_write(const gguf_writer *w, const char *path, uint32_t alignment);
/* The GGUF name (llama.cpp's) of a Hugging Face Llama tensor name, into out. */
const char *gw_tensor_name(const char *hf, char *out, size_t size);

#endif
