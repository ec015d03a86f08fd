// libFuzzer target: the PyTorch .pt reader (sniffing, libzip's container,
// the legacy container, the restricted pickle machine, storage and view
// checks) on arbitrary bytes. Seeds: the zip, legacy and protocol-4 files
// of tests/fixtures/pt/. Accepted files are checked: every tensor lies
// inside the buffer, its size matches its shape, and its bytes are read, so
// ASan sees any out-of-bounds copy.
#include <stdlib.h>
#include <string.h>

#include "weights/pt_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *bytes = malloc(size ? size : 1);  // the reader takes ownership
    if (!bytes) return 0;
    if (size) memcpy(bytes, data, size);
    SafeTensors tensors;
    ErrorMessage err = {{0}};
    if (pt_parse(bytes, size, &tensors, &err) != 0) {
        if (strchr(err.text, '\n')) abort();  // one line
        return 0;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < tensors.count; i++) {
        const SafeTensor *tensor = &tensors.tensors[i];
        if (tensor->offset + tensor->size > tensors.file_size) abort();
        if ((int64_t)tensor->size !=
            safe_tensor_elements(tensor) * (int64_t)safe_dtype_size(tensor->dtype))
            abort();
        const uint8_t *view = safetensors_data(&tensors, tensor);
        for (size_t b = 0; b < tensor->size; b++) sink ^= view[b];
    }
    (void)sink;
    safetensors_free(&tensors);
    return 0;
}
