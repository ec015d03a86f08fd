// The orientation tag (0x0112) of IFD0 in an EXIF block, read with libexif,
// as Pillow's ImageOps.exif_transpose reads it (image.getexif()[0x0112]).
#include "decode/decode_internal.h"

#include <stdlib.h>
#include <string.h>

#include <libexif/exif-data.h>

static const uint8_t EXIF_HEADER[6] = {'E', 'x', 'i', 'f', 0, 0};

static int is_tiff_header(const uint8_t *data, size_t size) {
    return size >= 4 && (memcmp(data, "II*\0", 4) == 0 || memcmp(data, "MM\0*", 4) == 0);
}

// libexif reads a block that starts with "Exif\0\0" or a JPEG's markers.
static int orientation_in_block(const uint8_t *data, size_t size) {
    if (size > 0xFFFFFFFFu) return 1;
    ExifData *exif = exif_data_new();
    if (!exif) return 1;
    // Read only: no mandatory tags added, nothing "fixed".
    exif_data_unset_option(exif, EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
    exif_data_load_data(exif, data, (unsigned int)size);
    int orientation = 1;
    ExifEntry *entry = exif_content_get_entry(exif->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
    if (entry && entry->format == EXIF_FORMAT_SHORT && entry->components >= 1 && entry->data &&
        entry->size >= 2) {
        const int value = exif_get_short(entry->data, exif_data_get_byte_order(exif));
        if (value >= 1 && value <= 8) orientation = value;
    }
    exif_data_unref(exif);
    return orientation;
}

int exif_orientation(const uint8_t *data, size_t size) {
    if (!data || size < 8) return 1;
    if (!is_tiff_header(data, size)) return orientation_in_block(data, size);
    // A bare TIFF structure (PNG's eXIf, most WebP EXIF chunks): libexif
    // wants the "Exif\0\0" header in front.
    uint8_t *block = malloc(size + sizeof EXIF_HEADER);
    if (!block) return 1;
    memcpy(block, EXIF_HEADER, sizeof EXIF_HEADER);
    memcpy(block + sizeof EXIF_HEADER, data, size);
    const int orientation = orientation_in_block(block, size + sizeof EXIF_HEADER);
    free(block);
    return orientation;
}
