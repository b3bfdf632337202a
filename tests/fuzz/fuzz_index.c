/* libFuzzer target: model.safetensors.index.json text. A parsed index names only plain
   files, and every tensor points at one of them. */
#include "fuzz_check.h"
#include "io.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    wgml__st_index ix;
    wgml_status s = wgml__st_index_parse("fuzz", (const char *)data, size, &ix);
    if (s != WGML_OK) {
        fuzz_check_failure(s, "fuzz");
        wgml__st_index_free(&ix);
        return 0;
    }
    for (size_t i = 0; i < ix.nnames; i++) FUZZ_CHECK(ix.shard_of[i] < ix.nshards);
    for (size_t i = 0; i < ix.nshards; i++) {
        FUZZ_CHECK(ix.shards[i][0] && !strchr(ix.shards[i], '/') && strcmp(ix.shards[i], "..") != 0);
        if (i) FUZZ_CHECK(strcmp(ix.shards[i - 1], ix.shards[i]) < 0);
    }
    wgml__st_index_free(&ix);
    return 0;
}
