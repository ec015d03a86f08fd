// SimCLR (Chen et al. 2020) with LightlyTrain's defaults: two views, a
// 2-layer projection head with BatchNorm (hidden 2048, output 128) and the
// NT-Xent loss at temperature 0.1 (negatives from every rank). Method args:
// hidden_dim, output_dim, temperature.
#include "ssl_methods/method_pair.h"
#include "ssl_methods/nt_xent.h"

static void simclr_loss_forward(void *loss, int batch, const float *out0, const float *out1,
                                float *value) {
    nt_xent_forward(loss, batch, out0, out1, value);
}
static void simclr_loss_backward(void *loss, float dloss, float *d0, float *d1) {
    nt_xent_backward(loss, dloss, d0, d1);
}
static void simclr_loss_destroy(void *loss) { nt_xent_destroy(loss); }

const MethodArgSpec simclr_arg_specs[] = {
    METHOD_ARG_DIM("hidden_dim"), METHOD_ARG_DIM("output_dim"),
    METHOD_ARG_TEMPERATURE("temperature"), METHOD_ARG_END,
};

int simclr_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    double hidden, out, temperature;
    if (method_arg_double(setup, "hidden_dim", 2048, &hidden, err) ||
        method_arg_double(setup, "output_dim", 128, &out, err) ||
        method_arg_double(setup, "temperature", 0.1, &temperature, err))
        return -1;
    NtXent *loss = nt_xent_create(method->backend, setup->batch, (int)out, (float)temperature,
                                  method->comm, err);
    if (!loss) return -1;
    const HeadSpec head = head_spec_simclr(method->embed.dim, (int)hidden, (int)out);
    return pair_method_create(method, setup, &head,
                              (PairLoss){loss, simclr_loss_forward, simclr_loss_backward,
                                         simclr_loss_destroy},
                              err);
}
