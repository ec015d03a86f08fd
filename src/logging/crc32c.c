// CRC-32C with a byte-at-a-time table built on first use. Event files are a
// few hundred bytes per step, so a table is fast enough; no SSE4.2 path.
#include "logging/crc32c.h"

#include <pthread.h>

static uint32_t crc_table[256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void build_crc_table(void) {
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t crc = byte;
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
        crc_table[byte] = crc;
    }
}

uint32_t crc32c(const void *data, size_t size) {
    pthread_once(&crc_table_once, build_crc_table);
    const uint8_t *bytes = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; i++) crc = crc_table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

uint32_t crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint32_t crc32c_masked(const void *data, size_t size) {
    return crc32c_mask(crc32c(data, size));
}
