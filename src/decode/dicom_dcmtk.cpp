// The C++ side of the DICOM decoder: DCMTK parses the data set from memory
// (DcmInputBufferStream) and decodes the first frame with its codecs
// (uncompressed, RLE, JPEG through its IJG libraries, JPEG-LS through its
// CharLS); everything about the samples' meaning is left to dicom.c. DCMTK
// reports through OFCondition and its logger: the logger is switched off, the
// conditions become messages. DCMTK as packaged by Debian has no JPEG 2000
// codec: such files fail with the transfer syntax named.
#include "decode/dicom_dcmtk.h"

#include <cstring>
#include <mutex>
#include <new>

#include "dcmtk/config/osconfig.h"
#include "dcmtk/dcmdata/dcdeftag.h"
#include "dcmtk/dcmdata/dcfilefo.h"
#include "dcmtk/dcmdata/dcistrmb.h"
#include "dcmtk/dcmdata/dcpixel.h"
#include "dcmtk/dcmdata/dcpixseq.h"
#include "dcmtk/dcmdata/dcpxitem.h"
#include "dcmtk/dcmdata/dcrledrg.h"
#include "dcmtk/dcmdata/dcxfer.h"
#include "dcmtk/dcmjpeg/djdecode.h"
#include "dcmtk/dcmjpls/djdecode.h"
#include "dcmtk/oflog/oflog.h"

// Values longer than this are not loaded by a header-only parse.
static const Uint32 HEADER_VALUE_LIMIT = 4096;

struct DicomFile {
    DcmFileFormat format;
};

namespace {

// Codecs and logger are process-wide in DCMTK: set up once, never torn down
// (DCMTK says codecs must not be deregistered while other threads decode).
void set_up_dcmtk() {
    static std::once_flag once;
    std::call_once(once, [] {
        OFLog::configure(OFLogger::OFF_LOG_LEVEL);
        DcmRLEDecoderRegistration::registerCodecs();
        DJDecoderRegistration::registerCodecs();
        DJLSDecoderRegistration::registerCodecs();
    });
}

void set_message(char *message, size_t capacity, const char *text) {
    if (capacity == 0) return;
    std::strncpy(message, text, capacity - 1);
    message[capacity - 1] = '\0';
}

DicomColour colour_of(const OFString &name) {
    if (name == "MONOCHROME1") return DICOM_MONOCHROME1;
    if (name == "MONOCHROME2") return DICOM_MONOCHROME2;
    if (name == "RGB") return DICOM_RGB;
    if (name == "YBR_FULL") return DICOM_YBR_FULL;
    if (name == "PALETTE COLOR") return DICOM_PALETTE;
    return DICOM_OTHER;
}

int uint16_tag(DcmItem *item, const DcmTagKey &key, int fallback) {
    Uint16 value = 0;
    return item->findAndGetUint16(key, value).good() ? value : fallback;
}

double decimal_tag(DcmItem *item, const DcmTagKey &key, double fallback) {
    Float64 value = 0;
    return item->findAndGetFloat64(key, value).good() ? value : fallback;
}

// A compressed YBR_FULL_422 frame comes out of its decoder with all three
// samples per pixel, not subsampled: it is YBR_FULL once decoded.
void set_colour(const OFString &photometric, const DcmXfer &syntax, DicomInfo *info) {
    info->colour = photometric == "YBR_FULL_422" && syntax.isEncapsulated()
                       ? DICOM_YBR_FULL
                       : colour_of(photometric);
    set_message(info->photometric, sizeof info->photometric,
                photometric.empty() ? "(none)" : photometric.c_str());
}

void fill_info(DcmDataset *dataset, DicomInfo *info) {
    *info = DicomInfo{};
    info->width = uint16_tag(dataset, DCM_Columns, 0);
    info->height = uint16_tag(dataset, DCM_Rows, 0);
    Sint32 frames = 1;
    if (dataset->findAndGetSint32(DCM_NumberOfFrames, frames).bad()) frames = 1;
    info->frames = frames;
    info->samples_per_pixel = uint16_tag(dataset, DCM_SamplesPerPixel, 1);
    info->bits_allocated = uint16_tag(dataset, DCM_BitsAllocated, 0);
    info->bits_stored = uint16_tag(dataset, DCM_BitsStored, info->bits_allocated);
    info->high_bit = uint16_tag(dataset, DCM_HighBit, info->bits_stored - 1);
    info->signed_samples = uint16_tag(dataset, DCM_PixelRepresentation, 0) == 1;
    info->planar = uint16_tag(dataset, DCM_PlanarConfiguration, 0) == 1;
    OFString photometric;
    dataset->findAndGetOFString(DCM_PhotometricInterpretation, photometric);
    const DcmXfer syntax(dataset->getOriginalXfer());
    set_colour(photometric, syntax, info);
    set_message(info->transfer_syntax, sizeof info->transfer_syntax, syntax.getXferName());
    info->slope = decimal_tag(dataset, DCM_RescaleSlope, 1.0);
    info->intercept = decimal_tag(dataset, DCM_RescaleIntercept, 0.0);
}

}  // namespace

extern "C" DicomFile *dicom_open(const uint8_t *data, size_t size, int header_only, DicomInfo *info,
                                 char *message, size_t message_capacity) {
    set_up_dcmtk();
    DicomFile *file = new (std::nothrow) DicomFile;
    if (!file) {
        set_message(message, message_capacity, "out of memory for a DICOM reader");
        return nullptr;
    }
    DcmInputBufferStream stream;
    stream.setBuffer(data, static_cast<offile_off_t>(size));
    stream.setEos();
    file->format.transferInit();
    const OFCondition status = file->format.read(
        stream, EXS_Unknown, EGL_noChange, header_only ? HEADER_VALUE_LIMIT : DCM_MaxReadLength);
    file->format.transferEnd();
    if (status.bad()) {
        set_message(message, message_capacity, status.text());
        delete file;
        return nullptr;
    }
    fill_info(file->format.getDataset(), info);
    return file;
}

extern "C" void dicom_close(DicomFile *file) { delete file; }

extern "C" int dicom_transfer_syntax(const char *uid, int *big_endian, int *implicit,
                                     int *deflated) {
    // An empty UID names DCMTK's internal implicit VR big endian (no file's
    // syntax: reading one, DCMTK guesses the data set's encoding instead,
    // and a walk that takes it for big endian loses step: fuzz_dicom, OOM).
    const DcmXfer syntax(uid);
    if (!uid[0] || syntax.getXfer() == EXS_Unknown) return -1;
    *big_endian = syntax.isBigEndian();
    *implicit = syntax.isImplicitVR();
    *deflated = syntax.getStreamCompression() != ESC_none;
    return 0;
}

// The first frame's fragment (item 1: item 0 is the offset table) of an
// encapsulated pixel data element, or -1 with "<codec>: no fragment ...".
static int first_fragment(DcmPixelData *pixel_data, E_TransferSyntax syntax, const char *codec,
                          const Uint8 **bytes, Uint32 *length, char *message, size_t capacity) {
    DcmPixelSequence *sequence = nullptr;
    DcmPixelItem *item = nullptr;
    Uint8 *data = nullptr;
    if (pixel_data->getEncapsulatedRepresentation(syntax, nullptr, sequence).bad() || !sequence ||
        sequence->getItem(item, 1).bad() || !item || item->getUint8Array(data).bad() || !data) {
        OFString text = codec;
        text += ": no fragment for the first frame";
        set_message(message, capacity, text.c_str());
        return -1;
    }
    *bytes = data;
    *length = item->getLength();
    return 0;
}

// The RLE header of the first frame's fragment (PS3.5 annex G: a count of
// 1..15 segments, then 15 offsets into the fragment), checked before
// DCMTK's RLE decoder reads it: DCMTK 3.6.7 follows an offset past the
// fragment's end (a crash found by fuzz_dicom). Each frame is one fragment.
static int check_rle_fragment(DcmPixelData *pixel_data, char *message, size_t capacity) {
    const Uint8 *bytes = nullptr;
    Uint32 length = 0;
    if (first_fragment(pixel_data, EXS_RLELossless, "RLE", &bytes, &length, message, capacity) != 0)
        return -1;
    const int header_bytes = 64;
    if (length < (Uint32)header_bytes) {
        set_message(message, capacity, "RLE: fragment shorter than its 64-byte header");
        return -1;
    }
    Uint32 header[16];
    for (int i = 0; i < 16; i++)  // little endian, whatever the host
        header[i] = (Uint32)bytes[4 * i] | (Uint32)bytes[4 * i + 1] << 8 |
                    (Uint32)bytes[4 * i + 2] << 16 | (Uint32)bytes[4 * i + 3] << 24;
    if (header[0] < 1 || header[0] > 15) {
        set_message(message, capacity, "RLE: segment count outside 1..15");
        return -1;
    }
    Uint32 previous = (Uint32)header_bytes - 1;
    for (Uint32 s = 1; s <= header[0]; s++) {
        if (header[s] <= previous || header[s] >= length) {
            set_message(message, capacity, "RLE: segment offset outside its fragment");
            return -1;
        }
        previous = header[s];
    }
    return 0;
}

// DCMTK's JPEG decoder first walks the first frame's fragment marker by
// marker for the sample precision (DJCodecDecoder::scanJpegDataForBitDepth,
// DCMTK 3.6.7 and its newest source alike), and that walk never moves past a
// TEM marker (FF 01): one before the frame header hangs the decoding thread
// for ever (found by fuzz_dicom). The same walk is made here first, and such
// a fragment refused. It stops where DCMTK's stops: at a frame header (SOF),
// at a marker it does not know, at the fragment's end.
static int check_jpeg_fragment(DcmPixelData *pixel_data, E_TransferSyntax syntax, char *message,
                               size_t capacity) {
    const Uint8 *bytes = nullptr;
    Uint32 length = 0;
    if (first_fragment(pixel_data, syntax, "JPEG", &bytes, &length, message, capacity) != 0)
        return -1;
    uint64_t offset = 0;
    while (offset + 4 < length) {
        const unsigned marker = (unsigned)bytes[offset] << 8 | bytes[offset + 1];
        const unsigned segment = (unsigned)bytes[offset + 2] << 8 | bytes[offset + 3];
        const int start_of_frame = marker >= 0xffc0 && marker <= 0xffcf && marker != 0xffc4 &&
                                   marker != 0xffc8 && marker != 0xffcc;
        if (start_of_frame) return 0;
        if (marker == 0xff01) {
            set_message(message, capacity,
                        "JPEG: a TEM marker (FF 01) before the frame header, which DCMTK's "
                        "decoder cannot get past");
            return -1;
        }
        if ((marker >= 0xffd0 && marker <= 0xffd9) || (marker >= 0xff03 && marker <= 0xffbf))
            offset += 2;  // RSTn, SOI, EOI and the reserved markers: no length
        else if (marker == 0xffff)
            offset += 1;  // a fill byte
        else if (marker >= 0xffc4)
            offset += segment + 2;  // a marker segment with its length (DHT, DQT, APPn, ...)
        else
            return 0;  // not a marker: DCMTK stops and says so
    }
    return 0;
}

extern "C" int dicom_first_frame(DicomFile *file, uint8_t *(*reserve)(void *, size_t),
                                 void *context, uint8_t **pixels, size_t *length, DicomInfo *info,
                                 char *message, size_t message_capacity) {
    DcmDataset *dataset = file->format.getDataset();
    DcmElement *element = nullptr;
    if (dataset->findAndGetElement(DCM_PixelData, element).bad() || !element) {
        set_message(message, message_capacity, "no pixel data");
        return -1;
    }
    DcmPixelData *pixel_data = OFstatic_cast(DcmPixelData *, element);
    Uint32 frame_size = 0;
    OFCondition status = pixel_data->getUncompressedFrameSize(dataset, frame_size);
    if (status.bad() || frame_size == 0) {
        set_message(message, message_capacity, status.bad() ? status.text() : "empty frame");
        return -1;
    }
    frame_size += frame_size & 1;  // DCMTK wants an even buffer size
    uint8_t *out = reserve(context, frame_size);
    if (!out) {
        set_message(message, message_capacity, "out of memory for the decoded frame");
        return -1;
    }
    const E_TransferSyntax syntax = dataset->getOriginalXfer();
    if (syntax == EXS_RLELossless && check_rle_fragment(pixel_data, message, message_capacity) != 0)
        return -1;
    if (syntax >= EXS_JPEGProcess1 && syntax <= EXS_JPEGProcess14SV1 &&
        check_jpeg_fragment(pixel_data, syntax, message, message_capacity) != 0)
        return -1;
    Uint32 fragment = 0;
    OFString decoded_colour;
    status =
        pixel_data->getUncompressedFrame(dataset, 0, fragment, out, frame_size, decoded_colour);
    if (status.bad()) {
        if (status == EC_CannotChangeRepresentation || status == EC_UnsupportedEncoding) {
            OFString text = "no decoder for the transfer syntax ";
            text += DcmXfer(syntax).getXferName();
            set_message(message, message_capacity, text.c_str());
        } else
            set_message(message, message_capacity, status.text());
        return -1;
    }
    if (!decoded_colour.empty())
        set_colour(decoded_colour, DcmXfer(syntax), info);
    // Decoders write colour-by-pixel unless the data set says otherwise.
    info->planar = uint16_tag(dataset, DCM_PlanarConfiguration, 0) == 1;
    *pixels = out;
    *length = frame_size;
    return 0;
}

extern "C" int dicom_palette(DicomFile *file, DicomLut luts[3], char *message,
                             size_t message_capacity) {
    DcmDataset *dataset = file->format.getDataset();
    static const DcmTagKey descriptors[3] = {DCM_RedPaletteColorLookupTableDescriptor,
                                             DCM_GreenPaletteColorLookupTableDescriptor,
                                             DCM_BluePaletteColorLookupTableDescriptor};
    static const DcmTagKey tables[3] = {DCM_RedPaletteColorLookupTableData,
                                        DCM_GreenPaletteColorLookupTableData,
                                        DCM_BluePaletteColorLookupTableData};
    for (int c = 0; c < 3; c++) {
        Uint16 entries = 0, first = 0, bits = 0;
        if (dataset->findAndGetUint16(descriptors[c], entries, 0).bad() ||
            dataset->findAndGetUint16(descriptors[c], first, 1).bad() ||
            dataset->findAndGetUint16(descriptors[c], bits, 2).bad()) {
            set_message(message, message_capacity, "palette descriptor missing");
            return -1;
        }
        DcmElement *element = nullptr;
        Uint8 *bytes = nullptr;
        if (dataset->findAndGetElement(tables[c], element).bad() || !element ||
            element->getUint8Array(bytes).bad() || !bytes) {
            Uint16 *words = nullptr;  // OW: read as 16-bit words, little-endian in memory
            if (!element || element->getUint16Array(words).bad() || !words) {
                set_message(message, message_capacity,
                            "palette data missing (segmented palettes are not read)");
                return -1;
            }
            bytes = reinterpret_cast<Uint8 *>(words);
        }
        luts[c].entries = entries ? entries : 65536;
        luts[c].first = first;
        luts[c].bits = bits;
        luts[c].data = bytes;
        luts[c].data_bytes = element->getLength();
    }
    return 0;
}
