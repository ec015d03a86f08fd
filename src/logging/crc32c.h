// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and the "masked" form
// TensorBoard / TFRecord files store after every record length and payload.
#ifndef LTC_LOGGING_CRC32C_H
#define LTC_LOGGING_CRC32C_H

#include <stddef.h>
#include <stdint.h>

// CRC of size bytes (initial value and final xor 0xFFFFFFFF).
uint32_t crc32c(const void *data, size_t size);

// ((crc >> 15) | (crc << 17)) + 0xa282ead8: what record files store, so that
// a CRC computed over bytes that themselves contain CRCs is not trivially 0.
uint32_t crc32c_mask(uint32_t crc);

// crc32c_mask(crc32c(data, size)).
uint32_t crc32c_masked(const void *data, size_t size);

#endif
