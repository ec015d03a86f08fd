// Deliberate changes to safetensors files our writer wrote, for tests: where
// a blob's data section starts, and re-recording its CRC-32 after a change
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
// records. 0, or -1 with a line on stderr (no such file, no recorded value).
int safetensors_edit_rerecord_crc32(const char *path, size_t blob_offset);

#endif
