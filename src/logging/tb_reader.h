// TensorBoard event-file reader: walks the records of one events.out.tfevents
// file, checks both CRCs of every record and decodes the events this project
// writes (file_version, scalars, images). Used by the tests and the
// end-to-end checks; TensorBoard itself silently stops at a bad record, this
// reader stops there too but says which record and why.
#ifndef LTC_LOGGING_TB_READER_H
#define LTC_LOGGING_TB_READER_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

// Records longer than this are treated as corrupt (no event of ours is near).
#define TB_READER_MAX_RECORD_BYTES (256u << 20)

typedef enum TbValueKind {
    TB_VALUE_OTHER = 0,  // a value kind this reader does not decode
    TB_VALUE_SCALAR,
    TB_VALUE_IMAGE,
} TbValueKind;

typedef struct TbValue {
    const char *tag;
    TbValueKind kind;
    float scalar;  // TB_VALUE_SCALAR: simple_value
    // TB_VALUE_IMAGE:
    int image_width;
    int image_height;
    int image_colorspace;
    const uint8_t *image_encoded;  // (image_encoded_size) PNG bytes
    size_t image_encoded_size;
} TbValue;

typedef struct TbEvent {
    double wall_time;
    int64_t step;
    const char *file_version;  // NULL unless this is the file_version event
    size_t value_count;        // summary values; 0 for a non-summary event
    const TbValue *values;     // (value_count)
} TbEvent;

typedef struct TbReader TbReader;

int tb_reader_open(TbReader **reader, const char *path, ErrorMessage *err);
void tb_reader_close(TbReader *reader);

// Reads the next record into *event (valid until the next call or close).
// Returns 1 for an event, 0 at a clean end of file, -1 for a truncated or
// corrupt record (bad length CRC, bad data CRC, undecodable event): the
// message names the record index and byte offset, and further calls return
// -1 again.
int tb_reader_next(TbReader *reader, TbEvent *event, ErrorMessage *err);

// Records read successfully so far.
size_t tb_reader_record_count(const TbReader *reader);
// Byte offset just past the last record read successfully (0 before the
// first): record k spans the offsets before and after its tb_reader_next.
uint64_t tb_reader_offset(const TbReader *reader);

#endif
