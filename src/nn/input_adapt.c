// timm's adapt_input_conv on weights in memory and in a loaded file
// (input_adapt.h).
#include "nn/input_adapt.h"

#include <stdlib.h>
#include <string.h>

#include "util/half.h"

void input_adapt_conv(const float *weight, int out, size_t kernel, int channels, float *adapted) {
    for (int o = 0; o < out; o++) {
        const float *from = weight + (size_t)o * 3 * kernel;
        float *to = adapted + (size_t)o * (size_t)channels * kernel;
        if (channels == 1) {
            for (size_t k = 0; k < kernel; k++) to[k] = from[k] + from[kernel + k] + from[2 * kernel + k];
            continue;
        }
        const float scale = 3.0f / (float)channels;
        for (int c = 0; c < channels; c++)
            for (size_t k = 0; k < kernel; k++)
                to[(size_t)c * kernel + k] = from[(size_t)(c % 3) * kernel + k] * scale;
    }
}

// A tensor's values as floats (F32, F16, BF16), or -1.
static int tensor_floats(const SafeTensors *file, const SafeTensor *tensor, float *out) {
    const void *data = safetensors_data(file, tensor);
    const size_t n = (size_t)safe_tensor_elements(tensor);
    switch (tensor->dtype) {
    case SAFE_F32: memcpy(out, data, n * sizeof *out); return 0;
    case SAFE_F16: convert_f16_to_f32(data, out, n); return 0;
    case SAFE_BF16: convert_bf16_to_f32(data, out, n); return 0;
    default: return -1;
    }
}

// The tensor's new values appended to the file's memory (data may move).
static int append_values(SafeTensors *file, SafeTensor *tensor, const float *values,
                         size_t count, ErrorMessage *err) {
    const size_t data_start = (size_t)(file->data - file->file);
    const size_t end = (file->file_size + 7) & ~(size_t)7;  // 8-byte aligned floats
    uint8_t *bigger = realloc(file->file, end + count * sizeof *values);
    if (!bigger) return error_set(err, "out of memory adapting \"%s\"", tensor->name);
    memcpy(bigger + end, values, count * sizeof *values);
    file->file = bigger;
    file->file_size = end + count * sizeof *values;
    file->data = bigger + data_start;
    tensor->dtype = SAFE_F32;
    tensor->offset = end - data_start;
    tensor->size = count * sizeof *values;
    return 0;
}

int input_adapt_file(SafeTensors *file, int out, int kernel_height, int kernel_width,
                     int channels, int *count, ErrorMessage *err) {
    *count = 0;
    if (channels == 3) return 0;
    const size_t kernel = (size_t)kernel_height * (size_t)kernel_width;
    for (int i = 0; i < file->count; i++) {
        SafeTensor *t = &file->tensors[i];
        if (t->rank != 4 || t->shape[0] != out || t->shape[1] != 3 ||
            t->shape[2] != kernel_height || t->shape[3] != kernel_width)
            continue;
        float *weight = malloc((size_t)out * 3 * kernel * sizeof *weight);
        float *adapted = malloc((size_t)out * (size_t)channels * kernel * sizeof *adapted);
        int status = !weight || !adapted ? error_set(err, "out of memory adapting \"%s\"", t->name)
                     : tensor_floats(file, t, weight)
                         ? error_set(err, "\"%s\" is %s: only float weights can be adapted to "
                                          "%d channels", t->name, safe_dtype_name(t->dtype),
                                     channels)
                         : 0;
        if (status == 0) {
            input_adapt_conv(weight, out, kernel, channels, adapted);
            status = append_values(file, t, adapted, (size_t)out * (size_t)channels * kernel, err);
            t->shape[1] = channels;
        }
        free(weight);
        free(adapted);
        if (status) return -1;
        (*count)++;
    }
    return 0;
}
