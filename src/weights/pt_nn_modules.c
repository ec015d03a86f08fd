// torch.nn's module attributes as torch.save pickles them (pt_nn_modules.h).
#include "weights/pt_nn_modules.h"

void pt_nn_empty_ordered_dict(PtWriter *w, const char *key) {
    pt_put_str(w, key);
    pt_ordered_dict_begin(w);
    pt_dict_end(w);
}

void pt_nn_module_begin(PtWriter *w, const char *module, const char *cls) {
    pt_object_begin(w, module, cls);
    pt_put_str(w, "training");
    pt_put_bool(w, 1);
    pt_nn_empty_ordered_dict(w, "_backward_hooks");
    pt_nn_empty_ordered_dict(w, "_forward_hooks");
}

void pt_nn_key_int(PtWriter *w, const char *key, int64_t value) {
    pt_put_str(w, key);
    pt_put_int(w, value);
}

void pt_nn_key_repeat(PtWriter *w, const char *key, int64_t value, int count) {
    const int64_t values[4] = {value, value, value, value};
    pt_put_str(w, key);
    pt_put_int_tuple(w, values, count);
}

void pt_nn_conv2d_attributes(PtWriter *w, const PtConv2d *conv) {
    pt_nn_key_int(w, "in_channels", conv->in_channels);
    pt_nn_key_int(w, "out_channels", conv->out_channels);
    pt_nn_key_repeat(w, "kernel_size", conv->kernel, 2);
    pt_nn_key_repeat(w, "stride", conv->stride, 2);
    pt_nn_key_repeat(w, "padding", conv->padding, 2);
    pt_nn_key_repeat(w, "dilation", 1, 2);
    pt_put_str(w, "transposed");
    pt_put_bool(w, conv->transposed);
    pt_nn_key_repeat(w, "output_padding", 0, 2);
    pt_nn_key_int(w, "groups", conv->groups);
    pt_put_str(w, "padding_mode");
    pt_put_str(w, "zeros");
    pt_nn_key_repeat(w, "_reversed_padding_repeated_twice", conv->padding, 4);
}

void pt_nn_batchnorm_attributes(PtWriter *w, int features, double eps, double momentum) {
    pt_nn_key_int(w, "num_features", features);
    pt_put_str(w, "eps");
    pt_put_float(w, eps);
    pt_put_str(w, "momentum");
    pt_put_float(w, momentum);
    pt_put_str(w, "affine");
    pt_put_bool(w, 1);
    pt_put_str(w, "track_running_stats");
    pt_put_bool(w, 1);
}
