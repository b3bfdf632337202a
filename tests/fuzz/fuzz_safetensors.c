/* libFuzzer target: a safetensors file in memory. Whatever the bytes, opening either fails
   with a well-formed message or yields tensors whose every byte lies inside the input. */
#include "fuzz_check.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    wgml_safetensors *st = NULL;
    wgml_status s = wgml_safetensors_open_memory(data, size, "fuzz", &st);
    if (s != WGML_OK) {
        FUZZ_CHECK(st == NULL);
        fuzz_check_failure(s, "fuzz");
        return 0;
    }
    size_t n = wgml_safetensors_count(st);
    uint64_t total = 0, first = UINT64_MAX;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        wgml_file_tensor t;
        FUZZ_CHECK(wgml_safetensors_info(st, i, &t) == WGML_OK);
        FUZZ_CHECK(t.ndim <= WGML_SAFETENSORS_MAX_DIMS && t.name != NULL);
        FUZZ_CHECK(t.offset >= 10 && t.offset <= size && t.nbytes <= size - t.offset);
        FUZZ_CHECK(wgml_safetensors_find(st, t.name) == (int64_t)i);
        uint64_t numel = 1;
        for (uint32_t d = 0; d < t.ndim; d++) numel = t.shape[d] ? numel * t.shape[d] : 0;
        FUZZ_CHECK(numel == t.numel && t.nbytes * 8 == t.numel * wgml_safetensors_dtype_bits(t.dtype));
        const uint8_t *p = wgml_safetensors_data(st, i);
        FUZZ_CHECK(p == data + t.offset);
        if (t.nbytes) sink ^= p[0] ^ p[t.nbytes - 1];   /* in bounds, or ASan says so */
        total += t.nbytes;
        if (t.offset < first) first = t.offset;
    }
    if (n && total) FUZZ_CHECK(first + total == size);   /* the tensors tile the data */
    for (size_t i = 0; i < wgml_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        FUZZ_CHECK(wgml_safetensors_metadata_item(st, i, &k, &v) == WGML_OK);
        FUZZ_CHECK(wgml_safetensors_metadata(st, k) != NULL);
        sink ^= (uint8_t)strlen(v);
    }
    FUZZ_CHECK(wgml_safetensors_data(st, n) == NULL);
    (void)sink;
    wgml_safetensors_close(st);
    return 0;
}
