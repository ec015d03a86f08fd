// torch.nn's modules as torch.save pickles them (weights/pt_writer.h): an
// object of the module's class (NEWOBJ) whose __dict__ (BUILD) holds
// `training`, the two hook dicts nn.Module.__setstate__ does not restore,
// the module's own attributes, then its _parameters, _buffers and
// _modules. What the two whole-module writers share: Ultralytics'
// checkpoint (weights/ultralytics_export.h) and torchvision's models
// (weights/torch_module_export.h).
#ifndef LTC_WEIGHTS_PT_NN_MODULES_H
#define LTC_WEIGHTS_PT_NN_MODULES_H

#include <stdint.h>

#include "weights/pt_writer.h"

// NEWOBJ of module.cls, then training=True (as a model is saved) and the
// empty _backward_hooks and _forward_hooks.
void pt_nn_module_begin(PtWriter *w, const char *module, const char *cls);
// key: a new, empty collections.OrderedDict.
void pt_nn_empty_ordered_dict(PtWriter *w, const char *key);
void pt_nn_key_int(PtWriter *w, const char *key, int64_t value);
// key: (value, value, ...) of count ints.
void pt_nn_key_repeat(PtWriter *w, const char *key, int64_t value, int count);

typedef struct PtConv2d {
    int in_channels, out_channels, kernel, stride, padding, groups;
    int transposed;  // ConvTranspose2d
} PtConv2d;
// Conv2d's (ConvTranspose2d's) attributes, as its __init__ sets them.
void pt_nn_conv2d_attributes(PtWriter *w, const PtConv2d *conv);
// BatchNorm2d's attributes (affine, tracking its running statistics).
void pt_nn_batchnorm_attributes(PtWriter *w, int features, double eps, double momentum);

#endif
