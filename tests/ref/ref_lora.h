/* The CPU reference of LoRA adapters, in double: an adapter changes each target W [out, in]
   into W' = W + scale * B A (A [rank, in], B [out, rank]); the model with W' is the model
   with the adapter (y = x W^T + scale (x A^T) B^T is the same product), so the reference
   model (ref_model.h) run on merged parameters gives the logits and loss, and the
   gradient G' of each merged weight gives the adapter's by the chain rule:
       dA = scale * B^T G',   dB = scale * G' A^T.
   Targets are numbered as wgml_lora_target's bits: q, k, v, o, gate, up, down, and in
   (LFM2's convolution in_proj; o is a convolution layer's out_proj there). */
#ifndef WGML_REF_LORA_H
#define WGML_REF_LORA_H

#include "ref_model.h"

#define REF_LORA_KINDS 8
/* The reference model's parameter index of target k (0..7) of layer l, -1 where the
   layer has none. */
int ref_lora_param(const ref_model_shape *s, int layer, int k);
/* [rows, cols] of target k's weight in layer l. */
void ref_lora_dims(const ref_model_shape *s, int layer, int k, int *out, int *in);

/* merged[i] = params[i], plus scale * B A for every target that has an adapter (a[l * 8 +
   k] not NULL). merged[i] must hold ref_model_param_numel(s, i) doubles. */
void ref_lora_merge(const ref_model_shape *s, const double *const *params, int rank, double scale,
                    const double *const *a, const double *const *b, double *const *merged);
/* dA and dB of target slot l * 8 + k from the merged weight's gradient g. */
void ref_lora_grads(int out, int in, int rank, double scale, const double *a, const double *b, const double *g, double *da,
                    double *db);

#endif
