// AVIF through libavif (avif.c), private to src/decode: the HEIF entry
// points (heif.c) hand every file whose ftyp names an AVIF brand to these,
// the rest (HEIC and other HEIF brands) to libheif. Signatures as the
// other formats' (decode_internal.h): the probe's size is the decoded one
// (clean aperture and rotation/mirroring applied), orientation 1, and the
// decode takes its region in those coordinates.
#ifndef LTC_DECODE_AVIF_H
#define LTC_DECODE_AVIF_H

#include "decode/decode_internal.h"

// 1 when the ftyp box names "avif" or "avis" as its major or a compatible
// brand (libavif's own test).
int decode_avif_accepts(const uint8_t *data, size_t size);

FormatProbe decode_avif_probe;
FormatDecode decode_avif_decode;

#endif
