// libFuzzer target: the safetensors reader (header length, JSON header,
// names, dtypes, shapes, offsets and tiling) on arbitrary bytes. Accepted
// files are checked: every tensor lies inside the data and its bytes are
// read, so ASan sees any out-of-bounds view.
#include <stdlib.h>
#include <string.h>

#include "nn/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *bytes = malloc(size ? size : 1);  // the parser takes ownership
    if (!bytes) return 0;
    if (size) memcpy(bytes, data, size);
    SafeTensors tensors;
    ErrorMessage err;
    if (safetensors_parse(bytes, size, &tensors, &err) != 0) return 0;
    const size_t data_size = tensors.file_size - (size_t)(tensors.data - tensors.file);
    volatile uint8_t sink = 0;
    for (int i = 0; i < tensors.count; i++) {
        const SafeTensor *tensor = &tensors.tensors[i];
        if (tensor->offset + tensor->size > data_size) abort();
        if ((int64_t)tensor->size != safe_tensor_elements(tensor) * (int64_t)safe_dtype_size(tensor->dtype))
            abort();
        if (safetensors_find(&tensors, tensor->name) == NULL) abort();
        const uint8_t *view = safetensors_data(&tensors, tensor);
        for (size_t b = 0; b < tensor->size; b++) sink ^= view[b];
    }
    for (int i = 0; i < tensors.metadata_count; i++)
        if (safetensors_metadata(&tensors, tensors.metadata[i].key) == NULL) abort();
    (void)sink;
    safetensors_free(&tensors);
    return 0;
}
