// GIF through giflib: the first frame, as Pillow's Image.open(...).convert("RGB")
// shows it. The canvas is the logical screen (grown to the frame when the
// frame reaches past it, as Pillow does), filled with the frame's transparent
// index when its graphic control extension names one, else with index 0;
// the frame's rows are drawn on it; indices become colours through the
// frame's local colour table, else the global one (indices past the table's
// end are black); a file without any colour table is grey (index = level).
// Transparency is not composited, as Pillow's convert("RGB") does not.
//
// LZW data is sequential: rows below the region are not decoded unless the
// whole file is to be checked (interlaced frames are read whole). Frames
// after the first are never read.
//
// Before the canvas is allocated, the frame's pixels are checked against the
// bytes left in the file: one LZW code emits at most 4096 pixels (the
// table's size) and takes at least 3 bits, so a byte of data makes at most
// 4096 * 8 / 3 pixels. A 35-byte file declaring a 9000 x 9000 frame is
// refused as truncated instead of allocating 81 MB first.
#include "decode/decode_internal.h"

#include <string.h>

#include <gif_lib.h>

#define GIF_MAX_PIXELS_PER_BYTE (4096 * 8 / 3 + 1)

typedef struct GifSource {
    const uint8_t *data;
    size_t size, offset;
    int ran_out;  // giflib asked for bytes past the end
} GifSource;

static int read_from_memory(GifFileType *gif, GifByteType *out, int length) {
    GifSource *source = gif->UserData;
    size_t n = length > 0 ? (size_t)length : 0;
    if (n > source->size - source->offset) {
        n = source->size - source->offset;
        source->ran_out = 1;
    }
    memcpy(out, source->data + source->offset, n);
    source->offset += n;
    return (int)n;
}

// giflib's DGifOpen reports a cut-off header as "no screen descriptor":
// running out of bytes says which it was.
static int report_gif_error(int code, const GifSource *source, ErrorMessage *err) {
    if (source->ran_out) return error_set(err, "truncated: GIF data ends early");
    switch (code) {
    case D_GIF_ERR_READ_FAILED:
    case D_GIF_ERR_EOF_TOO_SOON: return error_set(err, "truncated: GIF data ends early");
    case D_GIF_ERR_NOT_ENOUGH_MEM: return error_set(err, "out of memory in giflib");
    default: break;
    }
    const char *reason = GifErrorString(code);
    return error_set(err, "corrupt data: giflib: %s", reason ? reason : "unknown error");
}

// The open file, read up to the first frame's image descriptor.
typedef struct FirstFrame {
    GifFileType *gif;
    GifSource source;
    int transparent;  // index, or NO_TRANSPARENT_COLOR
    int canvas_width, canvas_height;
} FirstFrame;

static void close_gif(FirstFrame *frame) {
    int ignored;
    if (frame->gif) DGifCloseFile(frame->gif, &ignored);
    frame->gif = NULL;
}

static int fail(FirstFrame *frame, ErrorMessage *err) {
    const int code = frame->gif ? frame->gif->Error : D_GIF_ERR_OPEN_FAILED;
    close_gif(frame);
    return report_gif_error(code, &frame->source, err);
}

static int open_first_frame(const uint8_t *data, size_t size, FirstFrame *frame,
                            ErrorMessage *err) {
    memset(frame, 0, sizeof *frame);
    frame->source = (GifSource){data, size, 0, 0};
    frame->transparent = NO_TRANSPARENT_COLOR;
    int code = 0;
    frame->gif = DGifOpen(&frame->source, read_from_memory, &code);
    if (!frame->gif) return report_gif_error(code, &frame->source, err);
    for (;;) {
        GifRecordType record;
        if (DGifGetRecordType(frame->gif, &record) == GIF_ERROR) return fail(frame, err);
        if (record == TERMINATE_RECORD_TYPE) {
            close_gif(frame);
            return error_set(err, "corrupt data: GIF has no image");
        }
        if (record == IMAGE_DESC_RECORD_TYPE) break;
        if (record != EXTENSION_RECORD_TYPE) continue;
        int code_number;
        GifByteType *block;
        if (DGifGetExtension(frame->gif, &code_number, &block) == GIF_ERROR)
            return fail(frame, err);
        if (code_number == GRAPHICS_EXT_FUNC_CODE && block) {
            GraphicsControlBlock control;
            if (DGifExtensionToGCB(block[0], block + 1, &control) == GIF_OK)
                frame->transparent = control.TransparentColor;
        }
        while (block)
            if (DGifGetExtensionNext(frame->gif, &block) == GIF_ERROR) return fail(frame, err);
    }
    if (DGifGetImageDesc(frame->gif) == GIF_ERROR) return fail(frame, err);
    const GifImageDesc *desc = &frame->gif->Image;
    const int64_t right = (int64_t)desc->Left + desc->Width,
                  bottom = (int64_t)desc->Top + desc->Height;
    frame->canvas_width = (int)(right > frame->gif->SWidth ? right : frame->gif->SWidth);
    frame->canvas_height = (int)(bottom > frame->gif->SHeight ? bottom : frame->gif->SHeight);
    return 0;
}

int decode_gif_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                     ErrorMessage *err) {
    (void)decoder;
    FirstFrame frame;
    if (open_first_frame(data, size, &frame, err) != 0) return -1;
    info->width = frame.canvas_width;
    info->height = frame.canvas_height;
    close_gif(&frame);
    return 0;
}

// The frame's rows drawn on the index canvas (canvas_width wide, rows
// [0, rows_needed) kept), reading no further than row `rows_needed` of the
// canvas unless whole.
static int draw_frame(FirstFrame *frame, uint8_t *canvas, int rows_needed, int whole,
                      uint8_t *spare_row, ErrorMessage *err) {
    GifFileType *gif = frame->gif;
    const GifImageDesc *desc = &gif->Image;
    if (desc->Width <= 0 || desc->Height <= 0) return 0;
    static const int interlace_start[4] = {0, 4, 2, 1}, interlace_step[4] = {8, 8, 4, 2};
    const int passes = desc->Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; pass++) {
        const int start = desc->Interlace ? interlace_start[pass] : 0;
        const int step = desc->Interlace ? interlace_step[pass] : 1;
        for (int row = start; row < desc->Height; row += step) {
            const int y = desc->Top + row;
            if (!whole && !desc->Interlace && y >= rows_needed) return 0;
            uint8_t *target =
                y < rows_needed ? canvas + (size_t)y * frame->canvas_width + desc->Left : spare_row;
            if (DGifGetLine(gif, target, desc->Width) == GIF_ERROR)
                return report_gif_error(gif->Error, &frame->source, err);
        }
    }
    return 0;
}

int decode_gif_decode(Decoder *decoder, const uint8_t *data, size_t size,
                      const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    FirstFrame frame;
    PixelRect region;
    if (open_first_frame(data, size, &frame, err) != 0) return -1;
    const int width = frame.canvas_width, height = frame.canvas_height;
    if (decode_check_size(decoder, "GIF image", width, height, err) != 0 ||
        decode_clamp_region(request, width, height, &region, err) != 0) {
        close_gif(&frame);
        return -1;
    }
    // The frame's size is copied out: close_gif frees the descriptor it lives in.
    const int frame_width = frame.gif->Image.Width, frame_height = frame.gif->Image.Height;
    const uint64_t frame_pixels = (uint64_t)(frame_width > 0 ? frame_width : 0) *
                                  (uint64_t)(frame_height > 0 ? frame_height : 0);
    const uint64_t left = frame.source.size - frame.source.offset;
    if (frame_pixels > left * GIF_MAX_PIXELS_PER_BYTE) {
        close_gif(&frame);
        return error_set(err,
                         "truncated: GIF frame of %d x %d pixels needs at least %llu bytes of "
                         "LZW data, the file has %llu left",
                         frame_width, frame_height,
                         (unsigned long long)(frame_pixels / GIF_MAX_PIXELS_PER_BYTE),
                         (unsigned long long)left);
    }
    const int rows_needed = region.y + region.height;
    uint8_t *canvas = decode_buffer_reserve(&decoder->samples, (size_t)width * rows_needed, err);
    uint8_t *spare_row =
        canvas ? decode_buffer_reserve(&decoder->scratch, (size_t)width, err) : NULL;
    if (!spare_row) {
        close_gif(&frame);
        return -1;
    }
    memset(canvas, frame.transparent >= 0 ? frame.transparent : 0, (size_t)width * rows_needed);
    if (draw_frame(&frame, canvas, rows_needed, request && request->whole_file, spare_row, err) !=
        0) {
        close_gif(&frame);
        return -1;
    }
    const ColorMapObject *map =
        frame.gif->Image.ColorMap ? frame.gif->Image.ColorMap : frame.gif->SColorMap;
    const size_t stride = (size_t)region.width * 3;
    uint8_t *pixels = decode_buffer_reserve(&decoder->pixels, stride * (size_t)region.height, err);
    if (pixels) {
        for (int y = 0; y < region.height; y++) {
            const uint8_t *index = canvas + (size_t)(region.y + y) * width + region.x;
            uint8_t *rgb = pixels + (size_t)y * stride;
            for (int x = 0; x < region.width; x++, rgb += 3) {
                if (!map) {
                    rgb[0] = rgb[1] = rgb[2] = index[x];
                } else if (index[x] < map->ColorCount) {
                    const GifColorType colour = map->Colors[index[x]];
                    rgb[0] = colour.Red, rgb[1] = colour.Green, rgb[2] = colour.Blue;
                } else {
                    rgb[0] = rgb[1] = rgb[2] = 0;
                }
            }
        }
    }
    close_gif(&frame);
    if (!pixels) return -1;
    out->image = (Image){pixels, region.width, region.height, stride};
    out->covered = region;
    return 0;
}
