// TensorBoard event files (train/tensorboard.h) below the reader: CRC32C against published
// check values (the CRC catalogue's "123456789" and RFC 3720's iSCSI vectors), also fed in
// pieces; TFRecord's masking and framing byte for byte; hand-encoded Event messages byte for
// byte (a file_version event, a SessionLog START, a Summary of scalars) and an encoding that
// does not fit refused. test_tensorboard.sh reads whole files back with TensorBoard's own reader.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "train/tensorboard.h"

static int failures = 0;

static void check(int cond, const char* name) {
    if (cond) printf("ok - tensorboard unit: %s\n", name);
    else { printf("not ok - tensorboard unit: %s\n", name); failures++; }
}

static void check_crc(const void* data, size_t n, uint32_t want, const char* name) {
    uint32_t got = tb_crc32c(0, data, n);
    char what[160];
    snprintf(what, sizeof(what), "CRC32C(%s) = 0x%08X (got 0x%08X)", name, want, got);
    check(got == want, what);
}

static uint32_t le32(const uint8_t* p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

int main(void) {
    // Published check values.
    check_crc("123456789", 9, 0xE3069283u, "\"123456789\"");
    check_crc("", 0, 0x00000000u, "\"\"");
    uint8_t buf[32];
    memset(buf, 0, sizeof(buf));
    check_crc(buf, 32, 0x8A9136AAu, "32 zero bytes (RFC 3720)");
    memset(buf, 0xff, sizeof(buf));
    check_crc(buf, 32, 0x62A8AB43u, "32 0xFF bytes (RFC 3720)");
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    check_crc(buf, 32, 0x46DD794Eu, "bytes 0..31 (RFC 3720)");
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    check_crc(buf, 32, 0x113FDB5Cu, "bytes 31..0 (RFC 3720)");
    // Continued over pieces: the same as whole.
    uint32_t c = tb_crc32c(0, "1234", 4);
    c = tb_crc32c(c, "56789", 5);
    check(c == 0xE3069283u, "CRC32C continued over two pieces equals the whole's");

    // Masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked out independently (Python) for two values.
    check(tb_masked_crc(0) == 0xa282ead8u, "masked CRC of 0 is 0xa282ead8");
    check(tb_masked_crc(0xE3069283u) == 0xC78AB0E5u, "masked CRC of 0xE3069283 is 0xC78AB0E5");

    // Framing: uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the data.
    uint8_t rec[64];
    size_t n = tb_frame_record((const uint8_t*)"123456789", 9, rec);
    const uint8_t len9[8] = {9, 0, 0, 0, 0, 0, 0, 0};
    check(n == 25 && !memcmp(rec, len9, 8), "framed record: 25 bytes, little-endian length 9 first");
    check(le32(rec + 8) == tb_masked_crc(tb_crc32c(0, len9, 8)), "framed record: the length's masked CRC");
    check(!memcmp(rec + 12, "123456789", 9), "framed record: the data after 12 bytes");
    check(le32(rec + 21) == 0xC78AB0E5u, "framed record: the data's masked CRC last");

    // Events, byte for byte (wall_time 1.5 is 0x3FF8000000000000).
    uint8_t ev[256];
    n = tb_encode_event(ev, sizeof(ev), 1.5, 0, "brain.Event:2", 0, NULL, 0);
    const uint8_t want_version[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0x00, 0x1a, 13,
                                    'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
    check(n == sizeof(want_version) && !memcmp(ev, want_version, n), "event: file_version \"brain.Event:2\"");
    n = tb_encode_event(ev, sizeof(ev), 1.5, 300, NULL, 1, NULL, 0);
    const uint8_t want_start[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0xac, 0x02, 0x3a, 0x02, 0x08, 0x01};
    check(n == sizeof(want_start) && !memcmp(ev, want_start, n), "event: SessionLog START at step 300 (a 2-byte varint)");
    const TbScalar v[2] = {{"a", 1.0f}, {"b/c", -2.0f}};
    n = tb_encode_event(ev, sizeof(ev), 1.5, 3, NULL, 0, v, 2);
    const uint8_t want_scalars[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0x03, 0x2a, 22,
                                    0x0a, 8, 0x0a, 1, 'a', 0x15, 0x00, 0x00, 0x80, 0x3f,
                                    0x0a, 10, 0x0a, 3, 'b', '/', 'c', 0x15, 0x00, 0x00, 0x00, 0xc0};
    check(n == sizeof(want_scalars) && !memcmp(ev, want_scalars, n), "event: a Summary of two scalars at step 3");
    check(tb_encode_event(ev, 20, 1.5, 3, NULL, 0, v, 2) == 0, "event: an encoding that does not fit returns 0");

    printf("%s\n", failures ? "tensorboard unit: FAILED" : "tensorboard unit: all passed");
    return failures ? 1 : 0;
}
