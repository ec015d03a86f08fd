// The canvas sizes of HEIF grid and overlay items against the pixel limit,
// checked before libheif reads the file (heif_check_canvases).
//
// libheif 1.15 allocates a grid's canvas (and an overlay's) at the size the
// item's own descriptor gives, and never compares it with the item's 'ispe'
// property, the size it reports (and we check against --max-pixels). A
// 920-byte file whose grid descriptor says 35212 x 50531 pixels (1.8
// gigapixels; its 'ispe' says 24 x 16) made libheif fill gigabytes for half
// a minute and more (found by fuzz_heif from the seed of the grid of
// itself; tests/fixtures/fuzz_findings/heif_grid_canvas_bomb.heic). So the
// descriptors are read here, where libheif reads them: the item's data
// located by 'iloc' (its extents in the file, construction method 0, or in
// 'idat', method 1; libheif knows no other), and the canvas refused when it
// holds more pixels than the limit.
//
//   grid: version, flags, rows - 1, columns - 1, width, height
//   iovl: version, flags, 4 fill values (16-bit), width, height
// (width and height 32-bit when flags bit 0 is set, else 16-bit).
#include "decode/heif_boxes.h"

#include <string.h>

// Grid and overlay items checked in one 'meta' (each a walk of 'iloc').
#define HEIF_MAX_CANVASES 256
// Bytes of a descriptor read: an overlay's with 32-bit sizes.
#define HEIF_DESCRIPTOR_BYTES 18

// Big-endian fields of 0 to 8 bytes, bounded: a read past the end marks
// the reader bad and gives 0.
typedef struct Reader {
    const uint8_t *data;
    uint64_t size, at;
    int bad;
} Reader;

static uint64_t take(Reader *reader, unsigned bytes) {
    if (reader->bad || bytes > 8 || reader->size - reader->at < bytes) {
        reader->bad = 1;
        return 0;
    }
    uint64_t value = 0;
    for (unsigned i = 0; i < bytes; i++) value = value << 8 | reader->data[reader->at++];
    return value;
}

// The first `want` bytes of item `id`'s data, as libheif assembles it from
// its extents; how many were found (0 when the item has no location).
static size_t item_head(const HeifBox *iloc, const HeifBox *idat, const uint8_t *file,
                        uint64_t file_size, uint32_t id, uint8_t *out, size_t want) {
    Reader r = {iloc->body, iloc->size, 0, 0};
    const unsigned version = (unsigned)take(&r, 1);
    take(&r, 3);  // flags
    const unsigned sizes = (unsigned)take(&r, 2);
    const unsigned offset_size = sizes >> 12, length_size = sizes >> 8 & 15,
                   base_size = sizes >> 4 & 15, index_size = version >= 1 ? sizes & 15 : 0;
    const uint64_t items = take(&r, version < 2 ? 2 : 4);
    for (uint64_t i = 0; i < items && !r.bad; i++) {
        const uint64_t item = take(&r, version < 2 ? 2 : 4);
        const unsigned method = version >= 1 ? (unsigned)take(&r, 2) & 15 : 0;
        take(&r, 2);  // data reference index
        const uint64_t base = take(&r, base_size);
        const uint64_t extents = take(&r, 2);
        size_t got = 0;
        for (uint64_t e = 0; e < extents && !r.bad; e++) {
            take(&r, index_size);
            const uint64_t offset = take(&r, offset_size), length = take(&r, length_size);
            if (item != id || got == want || (method != 0 && method != 1)) continue;
            const uint8_t *source = method == 0 ? file : idat ? idat->body : NULL;
            const uint64_t source_size = method == 0 ? file_size : idat ? idat->size : 0;
            const uint64_t start = base + offset;
            if (!source || start < base || start >= source_size) continue;
            uint64_t available = source_size - start;
            if (length != 0 && length < available) available = length;  // 0: to the end
            const size_t copy = available < want - got ? (size_t)available : want - got;
            memcpy(out + got, source + start, copy);
            got += copy;
        }
        if (item == id) return got;
    }
    return 0;
}

// The canvas of a grid or overlay descriptor: -1 with the reason when it
// holds more than max_pixels.
static int check_canvas(const char *type, uint32_t id, const uint8_t *head, size_t bytes,
                        uint64_t max_pixels, ErrorMessage *err) {
    const size_t at = strcmp(type, "grid") == 0 ? 4 : 10;  // iovl: after 4 fill values
    const int wide = bytes >= 2 && (head[1] & 1);
    if (bytes < at + (wide ? 8 : 4)) return 0;  // libheif refuses a short descriptor
    const uint64_t width = wide ? heif_be32(head + at) : heif_be16(head + at);
    const uint64_t height = wide ? heif_be32(head + at + 4) : heif_be16(head + at + 2);
    if (width > DECODE_MAX_SIDE || height > DECODE_MAX_SIDE || width * height > max_pixels)
        return error_set(err,
                         "image too large: HEIF %s (item %u) of %llu x %llu pixels exceeds limit "
                         "%llu pixels",
                         strcmp(type, "grid") == 0 ? "grid" : "overlay", id,
                         (unsigned long long)width, (unsigned long long)height,
                         (unsigned long long)max_pixels);
    return 0;
}

// An 'infe' entry's item ID and type (versions 2 and 3; earlier ones have
// no type). 0, or -1 when it has none.
static int entry_type(const HeifBox *infe, uint32_t *id, char type[5]) {
    Reader r = {infe->body, infe->size, 0, 0};
    const unsigned version = (unsigned)take(&r, 1);
    take(&r, 3);  // flags
    if (version < 2) return -1;
    *id = (uint32_t)take(&r, version == 2 ? 2 : 4);
    take(&r, 2);  // protection index
    if (r.bad || r.size - r.at < 4) return -1;
    memcpy(type, r.data + r.at, 4);
    type[4] = '\0';
    return 0;
}

int heif_check_canvases(const HeifBox *meta, const uint8_t *file, uint64_t file_size,
                        uint64_t max_pixels, ErrorMessage *err) {
    HeifBox child, iinf = {0}, iloc = {0}, idat = {0};
    uint64_t at = 4;  // after version and flags
    while (at < meta->size && heif_next_box(meta->body, meta->size, &at, &child) == 0) {
        // The first of each, as libheif takes them.
        HeifBox *slot = strcmp(child.type, "iinf") == 0   ? &iinf
                        : strcmp(child.type, "iloc") == 0 ? &iloc
                        : strcmp(child.type, "idat") == 0 ? &idat
                                                          : NULL;
        if (slot && !slot->body) *slot = child;
    }
    if (!iinf.body || !iloc.body || iinf.size < 4) return 0;  // libheif refuses the file
    uint64_t entry = 4 + (iinf.body[0] == 0 ? 2 : 4);  // version, flags, entry count
    int canvases = 0;
    HeifBox infe;
    while (entry < iinf.size && heif_next_box(iinf.body, iinf.size, &entry, &infe) == 0) {
        uint32_t id;
        char type[5];
        if (strcmp(infe.type, "infe") != 0 || entry_type(&infe, &id, type) != 0 ||
            (strcmp(type, "grid") != 0 && strcmp(type, "iovl") != 0))
            continue;
        if (++canvases > HEIF_MAX_CANVASES)
            return error_set(err, "unsupported format: HEIF with more than %d grid or overlay "
                                  "images", HEIF_MAX_CANVASES);
        uint8_t head[HEIF_DESCRIPTOR_BYTES];
        const size_t bytes = item_head(&iloc, idat.body ? &idat : NULL, file, file_size, id,
                                       head, sizeof head);
        if (check_canvas(type, id, head, bytes, max_pixels, err) != 0) return -1;
    }
    return 0;
}
