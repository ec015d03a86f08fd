// Test helper: .pt fixtures made of per-channel bases (see pt_bases.h).
#include "pt_bases.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

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
