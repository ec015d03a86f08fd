// Damages a checkpoint in controlled ways for the end-to-end tests of what
// --resume, --checkpoint, export and embed refuse:
//   edit_checkpoint IN OUT [--meta KEY=VALUE]... [--i64 NAME=VALUE]... [--nan NAME]
//                          [--raw-meta KEY=VALUE]... [--flip-meta KEY]...
// copies IN to OUT with metadata values and I64 scalars replaced, then
// (--nan) overwrites the first element of F32 tensor NAME with NaN in the
// written file (the checkpoint writer itself refuses non-finite values) and
// records the CRC-32s of the changed data and header, so that the file reads
// as written. --raw-meta and --flip-meta change the written file's bytes as
// a text editor would, recording nothing: a metadata value replaced by one
// of the same length, or the lowest bit of its last character flipped.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../safetensors_edit.h"
#include "train/checkpoint.h"
#include "util/file.h"

#define MAX_EDITS 16

typedef struct Edits {
    const char *meta[MAX_EDITS];  // "KEY=VALUE"
    const char *i64[MAX_EDITS];   // "NAME=VALUE"
    const char *raw[MAX_EDITS];   // "KEY=VALUE" (--raw-meta) or "KEY" (--flip-meta)
    int meta_count, i64_count, raw_count;
    int flip[MAX_EDITS];          // raw[i] is a --flip-meta
    const char *nan_tensor;
} Edits;

// The value after "KEY=" in the edit that names key, or NULL.
static const char *edited(const char *const *list, int count, const char *key) {
    const size_t length = strlen(key);
    for (int i = 0; i < count; i++)
        if (strncmp(list[i], key, length) == 0 && list[i][length] == '=') return list[i] + length + 1;
    return NULL;
}

static int copy_checkpoint(const Checkpoint *in, const Edits *edits, const char *out,
                           ErrorMessage *err) {
    CheckpointWriter *writer = checkpoint_writer_create();
    if (!writer) return error_set(err, "out of memory");
    const SafeTensors *file = &in->tensors;
    int status = 0;
    for (int i = 0; i < file->count && !status; i++) {
        const SafeTensor *t = &file->tensors[i];
        const char *value = t->dtype == SAFE_I64 ? edited(edits->i64, edits->i64_count, t->name) : NULL;
        if (value)
            status = checkpoint_add_i64(writer, t->name, strtoll(value, NULL, 10), err);
        else
            status = checkpoint_add_tensor(writer, t->name, t->dtype, t->rank, t->shape,
                                           safetensors_data(file, t), err);
    }
    for (int i = 0; i < file->metadata_count && !status; i++) {
        const char *key = file->metadata[i].key;
        const char *value = edited(edits->meta, edits->meta_count, key);
        status = checkpoint_set_meta(writer, key, value ? value : file->metadata[i].value, err);
    }
    for (int i = 0; i < edits->meta_count && !status; i++) {  // new keys
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(edits->meta[i], "="), edits->meta[i]);
        if (!checkpoint_meta(in, key))
            status = checkpoint_set_meta(writer, key, edited(edits->meta, edits->meta_count, key),
                                         err);
    }
    if (!status) status = checkpoint_write(writer, out, err);
    checkpoint_writer_free(writer);
    return status;
}

// NaN into the first element of tensor `name` of the file at path: at byte
// 16 (checkpoint header) + 8 + the safetensors header length + its offset.
static int poison(const char *path, const char *name, ErrorMessage *err) {
    Checkpoint ckpt;
    if (checkpoint_read(path, &ckpt, err)) return -1;
    const SafeTensor *tensor = safetensors_find(&ckpt.tensors, name);
    const size_t offset = tensor ? tensor->offset : 0;
    const int ok = tensor && tensor->dtype == SAFE_F32;
    checkpoint_free(&ckpt);
    if (!ok) return error_set(err, "no F32 tensor \"%s\"", name);
    FILE *file = fopen(path, "r+b");
    uint64_t header = 0;
    const float nan = NAN;
    const int written = file && fseek(file, CHECKPOINT_HEADER_SIZE, SEEK_SET) == 0 &&
                        fread(&header, 8, 1, file) == 1 &&
                        fseek(file, (long)(CHECKPOINT_HEADER_SIZE + 8 + header + offset), SEEK_SET) == 0 &&
                        fwrite(&nan, sizeof nan, 1, file) == 1;
    if (file) fclose(file);
    // Read as written: the NaN check is under test, not the CRC-32's.
    return written && safetensors_edit_rerecord_crc32(path, CHECKPOINT_HEADER_SIZE) == 0
               ? 0
               : error_set(err, "%s: cannot patch", path);
}

// The raw edits (--raw-meta, --flip-meta) in the file at path's bytes.
static int edit_raw(const char *path, const Edits *edits, ErrorMessage *err) {
    ByteBuffer file = {0};
    if (file_read_all(path, &file, SIZE_MAX / 2, err)) return -1;
    const size_t header_end = safetensors_edit_data_offset(file.data, file.size,
                                                           CHECKPOINT_HEADER_SIZE);
    int status = 0;
    for (int i = 0; i < edits->raw_count && !status; i++) {
        const char *edit = edits->raw[i], *equals = strchr(edit, '=');
        const size_t key_length =
            edits->flip[i] || !equals ? strlen(edit) : (size_t)(equals - edit);
        char quoted[300];
        snprintf(quoted, sizeof quoted, "\"%.*s\":\"", (int)key_length, edit);
        uint8_t *found = memmem(file.data, header_end, quoted, strlen(quoted));
        uint8_t *value = found ? found + strlen(quoted) : NULL;
        const uint8_t *end = value ? memchr(value, '"', header_end - (size_t)(value - file.data))
                                   : NULL;
        if (!end || end == value) {
            status = error_set(err, "no metadata value \"%.*s\"", (int)key_length, edit);
        } else if (edits->flip[i]) {
            value[end - value - 1] ^= 1;  // a digit stays a digit: '5' -> '4'
        } else if (!equals || strlen(equals + 1) != (size_t)(end - value)) {
            status = error_set(err, "--raw-meta %s: the new value must have the old one's %zu "
                                    "bytes", edit, (size_t)(end - value));
        } else {
            memcpy(value, equals + 1, (size_t)(end - value));
        }
    }
    if (!status) {
        const FileChunk chunk = {file.data, file.size};
        status = file_write_atomic(path, &chunk, 1, err);
    }
    byte_buffer_free(&file);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: edit_checkpoint IN OUT [--meta KEY=VALUE]... [--i64 NAME=VALUE]... "
                        "[--nan NAME] [--raw-meta KEY=VALUE]... [--flip-meta KEY]...\n");
        return 2;
    }
    Edits edits = {0};
    for (int i = 3; i < argc; i++) {
        if (i + 1 >= argc) break;
        if (strcmp(argv[i], "--meta") == 0 && edits.meta_count < MAX_EDITS)
            edits.meta[edits.meta_count++] = argv[++i];
        else if (strcmp(argv[i], "--i64") == 0 && edits.i64_count < MAX_EDITS)
            edits.i64[edits.i64_count++] = argv[++i];
        else if (strcmp(argv[i], "--nan") == 0)
            edits.nan_tensor = argv[++i];
        else if ((strcmp(argv[i], "--raw-meta") == 0 || strcmp(argv[i], "--flip-meta") == 0) &&
                 edits.raw_count < MAX_EDITS) {
            edits.flip[edits.raw_count] = strcmp(argv[i], "--flip-meta") == 0;
            edits.raw[edits.raw_count++] = argv[++i];
        }
        else {
            fprintf(stderr, "edit_checkpoint: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    ErrorMessage err = {{0}};
    Checkpoint in;
    int status = checkpoint_read(argv[1], &in, &err);
    if (!status) {
        status = copy_checkpoint(&in, &edits, argv[2], &err);
        checkpoint_free(&in);
    }
    if (!status && edits.nan_tensor) status = poison(argv[2], edits.nan_tensor, &err);
    if (!status && edits.raw_count) status = edit_raw(argv[2], &edits, &err);
    if (status) fprintf(stderr, "edit_checkpoint: %s\n", err.text);
    return status ? 1 : 0;
}
