// Test helpers: .pt fixtures made of per-channel bases, a .pt's zip entries
// (see pt_bases.h).
#include "pt_bases.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <zip.h>

int assert_channel_bases(const SafeTensors *pt, const SafeTensors *bases) {
    int integers = 0;
    for (int i = 0; i < pt->count; i++) {
        const SafeTensor *t = &pt->tensors[i];
        if (t->dtype == SAFE_I64) {
            integers++;
            continue;
        }
        const SafeTensor *base = safetensors_find(bases, t->name);
        if (!base || base->dtype != t->dtype) fail_msg("\"%s\": no base of its dtype", t->name);
        const size_t bytes = safe_dtype_size(t->dtype);
        const uint8_t *values = safetensors_data(pt, t), *channels = safetensors_data(bases, base);
        const int64_t per_channel = safe_tensor_elements(t) / t->shape[0];
        for (int64_t e = 0; e < safe_tensor_elements(t); e++)
            if (memcmp(values + bytes * e, channels + bytes * (e / per_channel), bytes) != 0)
                fail_msg("\"%s\" element %lld is not its channel's base value", t->name,
                         (long long)e);
    }
    if (pt->count != bases->count + integers)
        fail_msg("%d tensors, %d bases and %d integers", pt->count, bases->count, integers);
    return integers;
}

uint8_t *pt_zip_entry(const char *path, const char *name, size_t *size) {
    int code = 0;
    zip_t *zip = zip_open(path, ZIP_RDONLY, &code);
    if (!zip) fail_msg("%s: not a zip (libzip error %d)", path, code);
    zip_stat_t info;
    if (zip_stat(zip, name, 0, &info) != 0) fail_msg("%s: no entry %s", path, name);
    uint8_t *bytes = malloc(info.size ? info.size : 1);
    zip_file_t *file = zip_fopen(zip, name, 0);
    assert_non_null(file);
    assert_int_equal(zip_fread(file, bytes, info.size), (zip_int64_t)info.size);
    zip_fclose(file);
    zip_close(zip);
    *size = (size_t)info.size;
    return bytes;
}

void pt_zip_pickle(const char *path, const char *name, PtPickle *pickle) {
    size_t size, consumed;
    uint8_t *bytes = pt_zip_entry(path, name, &size);
    ErrorMessage err;
    if (pt_pickle_load(bytes, size, 0, pickle, &consumed, &err)) fail_msg("%s", err.text);
    assert_int_equal(consumed, size);
    free(bytes);
}
