// A guard before DCMTK (dicom_lengths.c): DCMTK allocates an element's
// declared length before it reads the value (fuzzing found a 200-byte file
// asking for 4 GB, a 1.6 KB one for 2.6 GB), so every defined length is first
// checked against the bytes that hold it, read as DCMTK 3.6.7 reads them.
#ifndef LTC_DECODE_DICOM_LENGTHS_H
#define LTC_DECODE_DICOM_LENGTHS_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

// 0 when DCMTK may read the part 10 file data[0..size) ("DICM" at 128):
// its meta group holds a transfer syntax DCMTK knows, no deflated data set,
// and every element's length fits the bytes that hold it. Else -1 with a
// decode message ("truncated: ...", "corrupt data: ...", "unsupported
// format: ...").
int dicom_check_lengths(const uint8_t *data, size_t size, ErrorMessage *err);

#endif
