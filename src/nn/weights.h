// Weight I/O: a model's parameter and buffer tables to and from a
// torchvision-style state dict stored as safetensors. Names are the tables'
// names (torchvision's), shapes torchvision's (conv weights OIHW, converted
// from and to our OHWI), values F32 on save and F32/F16/BF16 on load.
//
// BatchNorm num_batches_tracked: a table holds one host counter per model;
// every BN (a buffer table entry "X.running_mean") is written with
// "X.num_batches_tracked" = that counter as an I64 scalar, and loading takes
// the largest value found (torchvision keeps them equal).
#ifndef LTC_NN_WEIGHTS_H
#define LTC_NN_WEIGHTS_H

#include <stdint.h>

#include "nn/parameters.h"
#include "nn/safetensors.h"
#include "util/error.h"

typedef struct WeightsLoadOptions {
    const char *key_prefix;     // file keys are key_prefix + name (e.g. "backbone."); NULL: ""
                                // keys without this prefix are not ours and are ignored
    const char *ignore_prefix;  // keys starting with it (after key_prefix) are skipped, e.g. "fc."
    int allow_missing;          // missing tensors keep their values instead of failing
    int allow_unexpected;       // unknown keys are skipped instead of failing
} WeightsLoadOptions;

// Writes params then, after each BN's bias, its running_mean, running_var
// and num_batches_tracked (torchvision's state_dict order), then the other
// buffers: a BN whose weight and bias are buffers too (not trained) gets
// num_batches_tracked 0. buffers may be NULL. Written by `write` (NULL:
// safetensors_write; nn/safetensors.h), as for every model's save below.
int weights_save(const char *path, const ParameterSet *params, const ParameterSet *buffers,
                 int64_t num_batches_tracked, StateDictWrite write, ErrorMessage *err);
// The same with the given safetensors metadata instead of {"format": "pt"}.
int weights_save_with_metadata(const char *path, const ParameterSet *params,
                               const ParameterSet *buffers, int64_t num_batches_tracked,
                               const SafeMetadata *metadata, int metadata_count,
                               StateDictWrite write, ErrorMessage *err);

// Checks the whole file first (missing and unexpected keys, dtypes, shapes;
// the message lists them), then converts and uploads. options may be NULL
// (strict). num_batches_tracked may be NULL; it is left unchanged when no
// counter is in the file.
int weights_load(const char *path, ParameterSet *params, ParameterSet *buffers,
                 int64_t *num_batches_tracked, const WeightsLoadOptions *options,
                 ErrorMessage *err);
// The same from a parsed file (e.g. a checkpoint holding several models).
int weights_load_from(const SafeTensors *file, ParameterSet *params, ParameterSet *buffers,
                      int64_t *num_batches_tracked, const WeightsLoadOptions *options,
                      ErrorMessage *err);

// Number of state-dict keys the tables produce (params + buffers + one
// num_batches_tracked per BN).
int weights_key_count(const ParameterSet *params, const ParameterSet *buffers);

// "(a, b, c)" of a shape, for messages.
void weights_format_shape(const int64_t *dims, int rank, char *out, size_t size);

// A file's tensor for a model tensor of torch shape (rank dims): 0 when it
// is there (tensor not NULL), F32, F16 or BF16 and of that shape (count_only:
// of as many elements, any shape), else -1 with "weights do not match the
// model: ..." naming key. The ViT and ConvNeXt loaders' one check.
int weights_check_tensor(const SafeTensor *tensor, const char *key, const int64_t *shape,
                         int rank, int count_only, ErrorMessage *err);

// The values of an F32, F16 or BF16 tensor of file as floats: out
// (elements) =.
void weights_tensor_to_float(const SafeTensors *file, const SafeTensor *tensor, float *out);

// Host-side layout conversion of one tensor: ours (O, KH, KW, I) <-> torch
// (O, I, KH, KW) for rank-4 parameters, a plain copy otherwise.
void weights_to_torch_layout(const Parameter *param, const float *ours, float *torch);
void weights_from_torch_layout(const Parameter *param, const float *torch, float *ours);

#endif
