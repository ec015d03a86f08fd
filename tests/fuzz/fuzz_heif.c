// libFuzzer target: the image decoders, HEIF (libheif) and AVIF (libavif) only.
#include "fuzz_decode_common.h"

// LeakSanitizer: libdav1d (AVIF, through libheif or libavif) keeps 40-byte blocks from
// some damaged files (found by fuzz_decode); that memory is not ours.
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libdav1d.so\n"; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_decode_input(data, size, IMAGE_FORMAT_HEIF);
}
