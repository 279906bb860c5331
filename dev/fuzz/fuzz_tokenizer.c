// The GPT-2 encoder (dataloader/tokenizer.c): any bytes encode (with and without special
// tokens: the first byte chooses) to ids inside the vocabulary that decode back to exactly
// those bytes (byte-level BPE loses nothing). The vocabulary comes from $FUZZ_GPT2_DIR, else
// $FSDP_DATA/gpt2, else ../shared/data/gpt2, else data/gpt2.
#include "dev/fuzz/fuzz_util.h"
#include "dataloader/tokenizer.h"

static Tokenizer* tok;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    const char* env = getenv("FUZZ_GPT2_DIR");
    const char* data = getenv("FSDP_DATA");
    char dirs[4][600];
    snprintf(dirs[0], sizeof(dirs[0]), "%s", env ? env : "");
    snprintf(dirs[1], sizeof(dirs[1]), "%s/gpt2", data ? data : "/nonexistent");
    snprintf(dirs[2], sizeof(dirs[2]), "../shared/data/gpt2");
    snprintf(dirs[3], sizeof(dirs[3]), "data/gpt2");
    char err[512] = "", enc[700], bpe[700];
    for (int i = 0; i < 4 && !tok; i++) {
        if (!dirs[i][0]) continue;
        snprintf(enc, sizeof(enc), "%s/encoder.json", dirs[i]);
        snprintf(bpe, sizeof(bpe), "%s/vocab.bpe", dirs[i]);
        tok = tokenizer_load(enc, bpe, err, sizeof(err));
    }
    if (!tok) { fprintf(stderr, "fuzz_tokenizer: no GPT-2 vocabulary (%s): set FUZZ_GPT2_DIR\n", err); exit(2); }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    int flags = data[0] & 1 ? TOKENIZER_ALLOW_SPECIAL : 0;
    const uint8_t* text = data + 1;
    size_t len = size - 1;
    TokenVec ids = {0};
    if (tokenizer_encode(tok, text, len, flags, &ids) != 0) {
        fprintf(stderr, "encode failed: %s\n", tokenizer_error(tok));
        abort();
    }
    for (size_t i = 0; i < ids.len; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= tokenizer_vocab_size(tok)) { fprintf(stderr, "id %d outside the vocabulary\n", ids.ids[i]); abort(); }
    unsigned char* back = NULL;
    size_t back_len = 0, cap = 0;
    if (tokenizer_decode_append(tok, ids.ids, ids.len, &back, &back_len, &cap) != 0) abort();
    if (back_len != len || (len && memcmp(back, text, len) != 0)) {
        fprintf(stderr, "decode(encode(x)) != x: %zu bytes in, %zu out (%zu ids)\n", len, back_len, ids.len);
        abort();
    }
    free(back);
    token_vec_free(&ids);
    return 0;
}
