// libFuzzer target: the checkpoint reader (16-byte header, then the
// safetensors blob) on arbitrary bytes. Accepted files are read through the
// checkpoint accessors: every tensor by the getter of its dtype, and the
// metadata, so ASan sees any out-of-bounds view. A getter may refuse only
// for the reasons the reader documents (checkpoint.h): a float tensor
// holding NaN or inf is refused, any other refusal of a well-formed tensor
// aborts. Seeds: tests/fuzz/seeds/checkpoint/ (tiny.ckpt written by
// tests/e2e/make_checkpoint --tiny before checkpoints recorded a CRC-32,
// tiny_crc32.ckpt after, both format version 1; tiny_header_crc32.ckpt:
// version 2, the header's CRC-32 too; nan_center.ckpt: tiny.ckpt with a NaN
// in dino.center, by tests/e2e/edit_checkpoint --nan).
#include <stdlib.h>
#include <string.h>

#include "train/checkpoint.h"
#include "util/finite.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *bytes = malloc(size ? size : 1);  // the parser takes ownership
    if (!bytes) return 0;
    if (size) memcpy(bytes, data, size);
    Checkpoint ckpt;
    ErrorMessage err;
    if (checkpoint_parse(bytes, size, &ckpt, &err) != 0) return 0;
    if (ckpt.version < 1 || ckpt.version > CHECKPOINT_FORMAT_VERSION) abort();
    volatile uint8_t sink = 0;
    for (int i = 0; i < ckpt.tensors.count; i++) {
        const SafeTensor *tensor = &ckpt.tensors.tensors[i];
        const size_t elements = (size_t)safe_tensor_elements(tensor);
        if (tensor->dtype == SAFE_F32) {
            float *floats = malloc(elements ? elements * sizeof *floats : 1);
            if (!floats) break;
            const void *stored = safetensors_data(&ckpt.tensors, tensor);
            const int finite = finite_first_bad_f32(stored, elements) == elements;
            const int status =
                checkpoint_get_host_floats(&ckpt, tensor->name, floats, elements, &err);
            if ((status == 0) != finite) abort();  // refused exactly when not finite
            for (size_t k = 0; status == 0 && k < elements; k++)
                sink ^= (uint8_t)(floats[k] != 0.0f);
            free(floats);
        } else if (tensor->dtype == SAFE_I64) {
            int64_t value;
            const int status = checkpoint_get_i64(&ckpt, tensor->name, &value, &err);
            if ((status == 0) != (elements == 1)) abort();
            if (status == 0) sink ^= (uint8_t)value;
        } else if (tensor->dtype == SAFE_U8) {
            const uint8_t *view;
            size_t view_size;
            if (checkpoint_get_bytes(&ckpt, tensor->name, &view, &view_size, &err) != 0) abort();
            if (view_size != elements) abort();
            for (size_t k = 0; k < view_size; k++) sink ^= view[k];
        }
    }
    for (int i = 0; i < ckpt.tensors.metadata_count; i++)
        if (checkpoint_meta(&ckpt, ckpt.tensors.metadata[i].key) == NULL) abort();
    (void)sink;
    checkpoint_free(&ckpt);
    return 0;
}
