// libFuzzer target: the image decoders, JPEG XL (libjxl) only.
#include "fuzz_decode_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_decode_input(data, size, IMAGE_FORMAT_JXL);
}
