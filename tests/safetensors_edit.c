// Deliberate changes to written safetensors files (see safetensors_edit.h).
#include "safetensors_edit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "nn/safetensors.h"
#include "train/checkpoint.h"

size_t safetensors_edit_data_offset(const uint8_t *bytes, size_t size, size_t blob_offset) {
    if (size < blob_offset + 8) return 0;
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--) header = header << 8 | bytes[blob_offset + (size_t)i];
    return header > size - blob_offset - 8 ? 0 : blob_offset + 8 + (size_t)header;
}

void safetensors_edit_rerecord_checkpoint_header(uint8_t *bytes, size_t size) {
    const size_t data = safetensors_edit_data_offset(bytes, size, CHECKPOINT_HEADER_SIZE);
    if (!data || size < CHECKPOINT_HEADER_SIZE || bytes[8] < 2) return;  // version 1: none
    const uint32_t crc = (uint32_t)crc32_z(0, bytes + CHECKPOINT_HEADER_SIZE,
                                           data - CHECKPOINT_HEADER_SIZE);
    for (int i = 0; i < 4; i++) bytes[12 + i] = (uint8_t)(crc >> (8 * i));
}

int safetensors_edit_rerecord_crc32(const char *path, size_t blob_offset) {
    FILE *file = fopen(path, "r+b");
    if (!file) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    fseek(file, 0, SEEK_END);
    const size_t size = (size_t)ftell(file);
    fseek(file, 0, SEEK_SET);
    uint8_t *bytes = malloc(size + 1);
    const int read = bytes && fread(bytes, 1, size, file) == size;
    const size_t data = read ? safetensors_edit_data_offset(bytes, size, blob_offset) : 0;
    static const char key[] = "\"" SAFETENSORS_CRC32_KEY "\":\"";
    uint8_t *found = data ? memmem(bytes, data, key, sizeof key - 1) : NULL;
    int status = -1;
    if (found && (size_t)(found - bytes) + sizeof key - 1 + 8 <= data) {
        char value[9];
        snprintf(value, sizeof value, "%08x", (unsigned)crc32_z(0, bytes + data, size - data));
        memcpy(found + sizeof key - 1, value, 8);
        // A checkpoint's header CRC-32 covers the value just changed.
        if (blob_offset == CHECKPOINT_HEADER_SIZE)
            safetensors_edit_rerecord_checkpoint_header(bytes, size);
        status = fseek(file, 0, SEEK_SET) == 0 && fwrite(bytes, 1, data, file) == data ? 0 : -1;
    }
    if (fclose(file) != 0) status = -1;
    if (status) fprintf(stderr, "%s: no CRC-32 recorded, or cannot rewrite it\n", path);
    free(bytes);
    return status;
}
