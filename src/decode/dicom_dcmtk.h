// The C interface of dicom_dcmtk.cpp, the thin C++ wrapper around DCMTK
// that dicom.c uses (DCMTK is a C++ library). Nothing here throws or prints:
// failures return -1 / NULL with a message.
#ifndef LTC_DECODE_DICOM_DCMTK_H
#define LTC_DECODE_DICOM_DCMTK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum DicomColour {
    DICOM_MONOCHROME1,  // minimum is white
    DICOM_MONOCHROME2,  // minimum is black
    DICOM_RGB,
    DICOM_YBR_FULL,  // YCbCr, full range, one sample of each per pixel
    DICOM_PALETTE,   // PALETTE COLOR: indices into three colour LUTs
    DICOM_OTHER,     // anything else (YBR_FULL_422 uncompressed, CMYK, HSV, ...)
} DicomColour;

typedef struct DicomInfo {
    int width, height, frames;
    int samples_per_pixel;
    int bits_allocated, bits_stored, high_bit;
    int signed_samples;  // PixelRepresentation 1
    int planar;          // PlanarConfiguration 1: R plane, G plane, B plane
    DicomColour colour;
    char photometric[32];      // as named in the file (after decompression: as decoded)
    char transfer_syntax[80];  // its name
    double slope, intercept;   // modality rescale (1, 0 when absent)
} DicomInfo;

// One colour LUT of a PALETTE COLOR image (pydicom's apply_color_lut terms).
typedef struct DicomLut {
    int entries;          // 1..65536
    int first;            // the stored value mapped to entry 0
    int bits;             // 8 or 16
    const uint8_t *data;  // entries values, 1 or 2 bytes each (little-endian)
    size_t data_bytes;
} DicomLut;

typedef struct DicomFile DicomFile;

// Parses the data set (pixel data still encoded). header_only: elements
// longer than a few KB (pixel data) are not loaded, for a cheap probe.
DicomFile *dicom_open(const uint8_t *data, size_t size, int header_only, DicomInfo *info,
                      char *message, size_t message_capacity);
void dicom_close(DicomFile *file);

// Decodes the first frame (every transfer syntax this DCMTK has a codec for:
// uncompressed, RLE, JPEG baseline/extended/lossless, JPEG-LS) into memory
// from reserve(context, bytes); info's photometric and colour become those
// of the decoded samples (DCMTK turns JPEG's YCbCr into RGB).
int dicom_first_frame(DicomFile *file, uint8_t *(*reserve)(void *context, size_t bytes),
                      void *context, uint8_t **pixels, size_t *length, DicomInfo *info,
                      char *message, size_t message_capacity);

// The red, green and blue LUTs of a PALETTE COLOR image; pointers stay valid
// until dicom_close.
int dicom_palette(DicomFile *file, DicomLut luts[3], char *message, size_t message_capacity);

// How DCMTK reads a data set of the transfer syntax `uid` (a UID or DCMTK's
// name of one, as DcmXfer looks it up): 0 and its byte order, VR encoding
// and stream compression; -1 for one DCMTK does not know (it then guesses
// the encoding from the data set's first bytes).
int dicom_transfer_syntax(const char *uid, int *big_endian, int *implicit, int *deflated);

#ifdef __cplusplus
}
#endif

#endif
