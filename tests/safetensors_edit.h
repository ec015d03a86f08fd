// Deliberate changes to safetensors files our writer wrote, for tests: where
// a blob's data section starts, and re-recording its CRC-32s after a change
// the test wants read as written (a NaN patched in, which the writer
// refuses to write), so that the check under test is reached instead of
// the CRC-32 check (nn/safetensors.h).
#ifndef LTC_TESTS_SAFETENSORS_EDIT_H
#define LTC_TESTS_SAFETENSORS_EDIT_H

#include <stddef.h>
#include <stdint.h>

// The offset of the data section of the safetensors blob that starts at
// blob_offset of bytes (0 for a .safetensors, 16 for a checkpoint), or 0
// when the bytes are too short to say.
size_t safetensors_edit_data_offset(const uint8_t *bytes, size_t size, size_t blob_offset);
// Writes the CRC-32 of the file's data section over the value its header
// records (and, for a checkpoint, blob_offset 16, the header's own CRC-32
// after it). 0, or -1 with a line on stderr (no such file, no recorded value).
int safetensors_edit_rerecord_crc32(const char *path, size_t blob_offset);
// Recomputes a version 2 checkpoint's header CRC-32 (bytes 12..15,
// train/checkpoint.h) over its blob's header as the bytes now hold it, so
// that a deliberate change there reaches the check under test.
void safetensors_edit_rerecord_checkpoint_header(uint8_t *bytes, size_t size);

#endif
