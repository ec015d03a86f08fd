// TensorBoard event-file reader: record framing and CRC checks, then
// protobuf-c decoding into the flat TbEvent / TbValue view.
#include "logging/tb_reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logging/crc32c.h"
#include "util/file.h"
#include "tensorboard.pb-c.h"

struct TbReader {
    FILE *file;
    char *path;
    uint64_t offset;       // byte offset of the next record
    size_t record_count;   // records read successfully
    int stopped;           // a bad record was found: reading stops there
    uint8_t *record;       // current record's data
    size_t record_capacity;
    Tensorboard__Event *decoded;  // current event (protobuf-c owned)
    TbValue *values;
    size_t values_capacity;
};

static uint64_t load_u64_le(const uint8_t *bytes) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; i--) value = (value << 8) | bytes[i];
    return value;
}

static uint32_t load_u32_le(const uint8_t *bytes) {
    return (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 |
           (uint32_t)bytes[3] << 24;
}

int tb_reader_open(TbReader **reader_out, const char *path, ErrorMessage *err) {
    *reader_out = NULL;
    TbReader *reader = calloc(1, sizeof *reader);
    if (!reader || !(reader->path = strdup(path))) {
        free(reader);
        return error_set(err, "%s: out of memory for the event reader", path);
    }
    const int fd = file_open_regular(path, NULL, err);
    reader->file = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!reader->file) {
        if (fd >= 0) {
            error_set(err, "%s", strerror(errno));
            close(fd);
        }
        error_prefix(err, "cannot open event file %s", path);
        tb_reader_close(reader);
        return -1;
    }
    *reader_out = reader;
    return 0;
}

void tb_reader_close(TbReader *reader) {
    if (!reader) return;
    if (reader->file) fclose(reader->file);
    if (reader->decoded) tensorboard__event__free_unpacked(reader->decoded, NULL);
    free(reader->record);
    free(reader->values);
    free(reader->path);
    free(reader);
}

size_t tb_reader_record_count(const TbReader *reader) {
    return reader->record_count;
}

uint64_t tb_reader_offset(const TbReader *reader) {
    return reader->offset;
}

static int stop_at_record(TbReader *reader, ErrorMessage *err, const char *reason) {
    reader->stopped = 1;
    return error_set(err, "%s: record %zu at byte %llu: %s", reader->path, reader->record_count,
                     (unsigned long long)reader->offset, reason);
}

// Fills the flat view of reader->decoded.
static int flatten_event(TbReader *reader, TbEvent *event, ErrorMessage *err) {
    const Tensorboard__Event *decoded = reader->decoded;
    memset(event, 0, sizeof *event);
    event->wall_time = decoded->wall_time;
    event->step = decoded->step;
    if (decoded->what_case == TENSORBOARD__EVENT__WHAT_FILE_VERSION)
        event->file_version = decoded->file_version;
    if (decoded->what_case != TENSORBOARD__EVENT__WHAT_SUMMARY) return 0;

    const Tensorboard__Summary *summary = decoded->summary;
    if (summary->n_value > reader->values_capacity) {
        TbValue *grown = realloc(reader->values, summary->n_value * sizeof *grown);
        if (!grown) return stop_at_record(reader, err, "out of memory for summary values");
        reader->values = grown;
        reader->values_capacity = summary->n_value;
    }
    for (size_t i = 0; i < summary->n_value; i++) {
        const Tensorboard__Summary__Value *source = summary->value[i];
        TbValue *value = &reader->values[i];
        memset(value, 0, sizeof *value);
        value->tag = source->tag;
        if (source->value_case == TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE) {
            value->kind = TB_VALUE_SCALAR;
            value->scalar = source->simple_value;
        } else if (source->value_case == TENSORBOARD__SUMMARY__VALUE__VALUE_IMAGE) {
            value->kind = TB_VALUE_IMAGE;
            value->image_width = source->image->width;
            value->image_height = source->image->height;
            value->image_colorspace = source->image->colorspace;
            value->image_encoded = source->image->encoded_image_string.data;
            value->image_encoded_size = source->image->encoded_image_string.len;
        }
    }
    event->value_count = summary->n_value;
    event->values = reader->values;
    return 0;
}

int tb_reader_next(TbReader *reader, TbEvent *event, ErrorMessage *err) {
    if (reader->stopped)
        return error_set(err, "%s: reading stopped at record %zu (bad record)", reader->path,
                         reader->record_count);
    if (reader->decoded) {
        tensorboard__event__free_unpacked(reader->decoded, NULL);
        reader->decoded = NULL;
    }
    uint8_t header[12];
    size_t got = fread(header, 1, sizeof header, reader->file);
    if (got == 0 && feof(reader->file)) return 0;
    if (got != sizeof header) return stop_at_record(reader, err, "truncated record header");
    if (crc32c_masked(header, 8) != load_u32_le(header + 8))
        return stop_at_record(reader, err, "length CRC mismatch");
    uint64_t length = load_u64_le(header);
    if (length > TB_READER_MAX_RECORD_BYTES)
        return stop_at_record(reader, err, "record length over the limit");

    size_t size = (size_t)length;
    if (size + 4 > reader->record_capacity) {
        uint8_t *grown = realloc(reader->record, size + 4);
        if (!grown) return stop_at_record(reader, err, "out of memory for the record");
        reader->record = grown;
        reader->record_capacity = size + 4;
    }
    if (fread(reader->record, 1, size + 4, reader->file) != size + 4)
        return stop_at_record(reader, err, "truncated record data");
    if (crc32c_masked(reader->record, size) != load_u32_le(reader->record + size))
        return stop_at_record(reader, err, "data CRC mismatch");
    reader->decoded = tensorboard__event__unpack(NULL, size, reader->record);
    if (!reader->decoded) return stop_at_record(reader, err, "not a decodable Event message");
    if (flatten_event(reader, event, err) != 0) return -1;
    reader->offset += 12 + size + 4;
    reader->record_count++;
    return 1;
}
