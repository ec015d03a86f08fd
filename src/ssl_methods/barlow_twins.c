// Barlow Twins (Zbontar et al. 2021): two views, a 3-layer projection head
// with BatchNorm (the paper's 8192-8192-8192 projector; smaller with
// hidden_dim/output_dim) and the cross-correlation loss with the paper's
// lambda 5e-3. Method args: hidden_dim, output_dim, lambda.
#include "ssl_methods/barlow_twins_loss.h"
#include "ssl_methods/method_pair.h"

static void barlow_forward(void *loss, int batch, const float *out0, const float *out1,
                           float *value) {
    barlow_twins_loss_forward(loss, batch, out0, out1, value);
}
static void barlow_backward(void *loss, float dloss, float *d0, float *d1) {
    barlow_twins_loss_backward(loss, dloss, d0, d1);
}
static void barlow_destroy(void *loss) { barlow_twins_loss_destroy(loss); }

const MethodArgSpec barlow_twins_arg_specs[] = {
    METHOD_ARG_DIM("hidden_dim"), METHOD_ARG_DIM("output_dim"), METHOD_ARG_WEIGHT("lambda"),
    METHOD_ARG_END,
};

int barlow_twins_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    double hidden, out, lambda;
    if (method_arg_double(setup, "hidden_dim", 8192, &hidden, err) ||
        method_arg_double(setup, "output_dim", 8192, &out, err) ||
        method_arg_double(setup, "lambda", 5e-3, &lambda, err))
        return -1;
    BarlowTwinsLoss *loss =
        barlow_twins_loss_create(method->backend, setup->batch, (int)out, (float)lambda, err);
    if (!loss) return -1;
    const HeadSpec head =
        head_spec_barlow_twins(method->embed.dim, (int)hidden, (int)out);
    return pair_method_create(method, setup, &head,
                              (PairLoss){loss, barlow_forward, barlow_backward, barlow_destroy},
                              err);
}
