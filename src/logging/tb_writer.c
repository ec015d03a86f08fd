// TensorBoard event writer: builds Event messages with protobuf-c, frames
// them as TFRecord records (length, masked CRC of length, data, masked CRC
// of data) and encodes images to PNG in memory with libpng.
#include "logging/tb_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <png.h>

#include "logging/crc32c.h"
#include "tensorboard.pb-c.h"

struct TbWriter {
    FILE *file;
    char *path;
    uint8_t *scratch;  // serialized event, reused between records
    size_t scratch_capacity;
    double last_flush_seconds;  // CLOCK_MONOTONIC
    int pending_records;        // written since the last flush
    int failed;                 // a write failed: the framing is no longer trustworthy
};

static double monotonic_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static double wall_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static void store_u64_le(uint8_t *out, uint64_t value) {
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(value >> (8 * i));
}

static void store_u32_le(uint8_t *out, uint32_t value) {
    for (int i = 0; i < 4; i++) out[i] = (uint8_t)(value >> (8 * i));
}

static int fail_write(TbWriter *writer, ErrorMessage *err, const char *what) {
    writer->failed = 1;
    return error_set(err, "%s: %s failed: %s", writer->path, what, strerror(errno));
}

int tb_flush(TbWriter *writer, ErrorMessage *err) {
    if (writer->failed) return error_set(err, "%s: an earlier write failed", writer->path);
    errno = 0;
    if (fflush(writer->file) != 0) return fail_write(writer, err, "flush");
    writer->pending_records = 0;
    writer->last_flush_seconds = monotonic_seconds();
    return 0;
}

// Serializes event and appends it as one record.
static int write_event(TbWriter *writer, const Tensorboard__Event *event, ErrorMessage *err) {
    if (writer->failed) return error_set(err, "%s: an earlier write failed", writer->path);
    size_t size = tensorboard__event__get_packed_size(event);
    if (size > writer->scratch_capacity) {
        uint8_t *grown = realloc(writer->scratch, size);
        if (!grown) return error_set(err, "%s: out of memory for a %zu-byte event", writer->path, size);
        writer->scratch = grown;
        writer->scratch_capacity = size;
    }
    tensorboard__event__pack(event, writer->scratch);

    uint8_t header[12];
    store_u64_le(header, (uint64_t)size);
    store_u32_le(header + 8, crc32c_masked(header, 8));
    uint8_t footer[4];
    store_u32_le(footer, crc32c_masked(writer->scratch, size));
    errno = 0;
    if (fwrite(header, 1, sizeof header, writer->file) != sizeof header ||
        fwrite(writer->scratch, 1, size, writer->file) != size ||
        fwrite(footer, 1, sizeof footer, writer->file) != sizeof footer) {
        return fail_write(writer, err, "write");
    }
    writer->pending_records++;
    if (writer->pending_records >= TB_FLUSH_RECORDS ||
        monotonic_seconds() - writer->last_flush_seconds >= TB_FLUSH_SECONDS) {
        return tb_flush(writer, err);
    }
    return 0;
}

// Event{wall_time, step, summary{value}}.
static int write_summary_value(TbWriter *writer, int64_t step, Tensorboard__Summary__Value *value,
                               ErrorMessage *err) {
    Tensorboard__Summary__Value *values[1] = {value};
    Tensorboard__Summary summary = TENSORBOARD__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = values;
    Tensorboard__Event event = TENSORBOARD__EVENT__INIT;
    event.wall_time = wall_seconds();
    event.step = step;
    event.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    event.summary = &summary;
    return write_event(writer, &event, err);
}

int tb_add_scalar(TbWriter *writer, const char *tag, int64_t step, float value, ErrorMessage *err) {
    Tensorboard__Summary__Value summary_value = TENSORBOARD__SUMMARY__VALUE__INIT;
    summary_value.tag = (char *)tag;
    summary_value.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    summary_value.simple_value = value;
    if (write_summary_value(writer, step, &summary_value, err) != 0)
        return error_prefix(err, "scalar '%s' step %lld", tag, (long long)step);
    return 0;
}

// ---- PNG encoding into memory --------------------------------------------------

typedef struct PngSink {
    uint8_t *data;
    size_t size;
    size_t capacity;
    int out_of_memory;
    char message[256];
} PngSink;

static void png_write_to_memory(png_structp png, png_bytep bytes, size_t length) {
    PngSink *sink = png_get_io_ptr(png);
    if (length > sink->capacity - sink->size) {
        size_t capacity = sink->capacity ? sink->capacity : 4096;
        while (capacity - sink->size < length) capacity *= 2;
        uint8_t *grown = realloc(sink->data, capacity);
        if (!grown) {
            sink->out_of_memory = 1;
            png_error(png, "out of memory");
        }
        sink->data = grown;
        sink->capacity = capacity;
    }
    memcpy(sink->data + sink->size, bytes, length);
    sink->size += length;
}

static void png_flush_nothing(png_structp png) {
    (void)png;
}

static void on_png_write_error(png_structp png, png_const_charp message) {
    PngSink *sink = png_get_error_ptr(png);
    snprintf(sink->message, sizeof sink->message, "%s", message);
    png_longjmp(png, 1);
}

static void on_png_write_warning(png_structp png, png_const_charp message) {
    (void)png;
    (void)message;
}

// rgb: (height, width, 3). On success sink->data holds the PNG (caller frees).
// level: zlib's compression level, -1 for its default.
static int encode_png(const uint8_t *rgb, int width, int height, int level, PngSink *sink,
                      ErrorMessage *err) {
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, sink, on_png_write_error, on_png_write_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return error_set(err, "PNG encoder: out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(sink->data);
        sink->data = NULL;
        return error_set(err, "PNG encoder: %s", sink->message);
    }
    png_set_write_fn(png, sink, png_write_to_memory, png_flush_nothing);
    if (level >= 0) png_set_compression_level(png, level);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; y++) png_write_row(png, rgb + (size_t)y * (size_t)width * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
}

int tb_encode_png(const uint8_t *rgb, int width, int height, int level, uint8_t **png,
                  size_t *size, ErrorMessage *err) {
    PngSink sink = {0};
    *png = NULL;
    *size = 0;
    if (encode_png(rgb, width, height, level, &sink, err) != 0) return -1;
    *png = sink.data;
    *size = sink.size;
    return 0;
}

int tb_add_image(TbWriter *writer, const char *tag, int64_t step, int width, int height,
                 const uint8_t *rgb, ErrorMessage *err) {
    if (width <= 0 || height <= 0 || width > (1 << 16) || height > (1 << 16))
        return error_set(err, "image '%s' step %lld: size %dx%d is not in 1..65536", tag,
                         (long long)step, width, height);
    PngSink sink = {0};
    if (encode_png(rgb, width, height, -1, &sink, err) != 0)
        return error_prefix(err, "image '%s' step %lld", tag, (long long)step);

    Tensorboard__Image image = TENSORBOARD__IMAGE__INIT;
    image.height = height;
    image.width = width;
    image.colorspace = 3;  // RGB
    image.encoded_image_string.data = sink.data;
    image.encoded_image_string.len = sink.size;
    Tensorboard__Summary__Value summary_value = TENSORBOARD__SUMMARY__VALUE__INIT;
    summary_value.tag = (char *)tag;
    summary_value.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_IMAGE;
    summary_value.image = &image;
    int status = write_summary_value(writer, step, &summary_value, err);
    free(sink.data);
    if (status != 0) return error_prefix(err, "image '%s' step %lld", tag, (long long)step);
    return 0;
}

// ---- open / close ------------------------------------------------------------------

// Opens the first free events.out.tfevents.<seconds>.<host>.<pid>.<n> in dir.
static int create_event_file(TbWriter *writer, const char *dir, ErrorMessage *err) {
    char hostname[256] = "localhost";
    if (gethostname(hostname, sizeof hostname) != 0 || hostname[0] == '\0') strcpy(hostname, "localhost");
    hostname[sizeof hostname - 1] = '\0';
    long long seconds = (long long)time(NULL);
    for (int n = 0; n < 1000; n++) {
        char *path = NULL;
        if (asprintf(&path, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, seconds, hostname,
                     (long)getpid(), n) < 0)
            return error_set(err, "%s: out of memory for the event file name", dir);
        errno = 0;
        FILE *file = fopen(path, "wbx");  // x: never overwrite another writer's file
        if (file) {
            writer->file = file;
            writer->path = path;
            return 0;
        }
        int open_errno = errno;
        if (open_errno != EEXIST) {
            error_set(err, "cannot create TensorBoard event file %s: %s", path, strerror(open_errno));
            free(path);
            return -1;
        }
        free(path);
    }
    return error_set(err, "%s: 1000 event files for this second and process already exist", dir);
}

int tb_writer_open(TbWriter **writer_out, const char *dir, ErrorMessage *err) {
    *writer_out = NULL;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return error_set(err, "cannot create TensorBoard log directory %s: %s", dir, strerror(errno));
    TbWriter *writer = calloc(1, sizeof *writer);
    if (!writer) return error_set(err, "%s: out of memory for the TensorBoard writer", dir);
    if (create_event_file(writer, dir, err) != 0) {
        free(writer);
        return -1;
    }
    writer->last_flush_seconds = monotonic_seconds();

    Tensorboard__Event event = TENSORBOARD__EVENT__INIT;
    event.wall_time = wall_seconds();
    event.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    event.file_version = (char *)"brain.Event:2";
    // Flushed at once so that TensorBoard lists the run as soon as it starts.
    if (write_event(writer, &event, err) != 0 || tb_flush(writer, err) != 0) {
        tb_writer_close(writer, NULL);
        return -1;
    }
    *writer_out = writer;
    return 0;
}

const char *tb_writer_path(const TbWriter *writer) {
    return writer->path;
}

int tb_writer_close(TbWriter *writer, ErrorMessage *err) {
    if (!writer) return 0;
    int status = 0;
    if (!writer->failed) status = tb_flush(writer, err);
    errno = 0;
    if (fclose(writer->file) != 0 && status == 0) {
        status = error_set(err, "%s: close failed: %s", writer->path, strerror(errno));
    }
    free(writer->scratch);
    free(writer->path);
    free(writer);
    return status;
}
