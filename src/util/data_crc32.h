// CRC-32 of data in memory, as files record it to detect damage: zlib's
// crc32 (the CRC-32 of zip, gzip and PNG, which torch.save's zip files carry
// too; logging/crc32c.h is the other polynomial, CRC-32C, only
// because TensorBoard's record format asks for it), written as 8 lowercase
// hex digits.
#ifndef LTC_UTIL_DATA_CRC32_H
#define LTC_UTIL_DATA_CRC32_H

#include <stdint.h>

#include "util/file.h"

// The CRC-32 of the pieces' bytes taken in order, as if one buffer. Split
// into blocks of 4 MiB that up to cpu_usable_cores() threads compute at
// once, joined in order with zlib's crc32_combine: one thread runs zlib's
// crc32 at ~3.7 GB/s on this project's EPYC, two at ~6.2 (docs/training.md,
// "Integrity": a ResNet-50 checkpoint's 224 MB in 36 ms).
uint32_t data_crc32(const FileChunk *pieces, int count);

#define DATA_CRC32_TEXT 9  // 8 hex digits and the terminating 0
void data_crc32_format(uint32_t crc, char text[DATA_CRC32_TEXT]);
// Exactly 8 hex digits (either case): 0; anything else: -1.
int data_crc32_parse(const char *text, uint32_t *crc);

#endif
