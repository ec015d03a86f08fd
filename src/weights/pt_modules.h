// The tensors of a whole pickled nn.Module (pt_pickle.h's PT_OBJECT tree)
// by the names its state_dict() gives them, found by module path: each
// module's `_parameters`, then its `_buffers` (those not listed in
// `_non_persistent_buffers_set`), then every child of `_modules` under
// "child.", PyTorch's order. A parameter or buffer that is None (Conv2d's
// bias=False) has no entry. Anything else where a module's dicts should be
// (a child that is not a module, a parameter that is not a tensor, a
// module without __dict__) is a one-line error naming its path.
#ifndef LTC_WEIGHTS_PT_MODULES_H
#define LTC_WEIGHTS_PT_MODULES_H

#include "nn/safetensors.h"
#include "util/error.h"
#include "weights/pt_pickle.h"

#define PT_MAX_MODULE_DEPTH 32  // nesting of modules (Ultralytics': 6)

typedef struct PtNamedTensor {
    char name[SAFETENSORS_MAX_NAME];
    const PtValue *tensor;  // PT_TENSOR
} PtNamedTensor;

// *out (malloc'ed, *count entries) = module's tensors; module a PT_OBJECT.
int pt_module_tensors(const PtValue *module, PtNamedTensor **out, int *count, ErrorMessage *err);

#endif
