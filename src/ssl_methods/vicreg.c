// VICReg (Bardes et al. 2022): two views, a 3-layer projection head with
// BatchNorm (the paper's 8192-8192-8192 expander; smaller with
// hidden_dim/output_dim) and the variance-invariance-covariance loss with the
// paper's coefficients (lambda 25, mu 25, nu 1). Method args: hidden_dim,
// output_dim, lambda, mu, nu.
#include "ssl_methods/method_pair.h"
#include "ssl_methods/vicreg_loss.h"

static void vicreg_forward(void *loss, int batch, const float *out0, const float *out1,
                           float *value) {
    vicreg_loss_forward(loss, batch, out0, out1, value);
}
static void vicreg_backward(void *loss, float dloss, float *d0, float *d1) {
    vicreg_loss_backward(loss, dloss, d0, d1);
}
static void vicreg_destroy(void *loss) { vicreg_loss_destroy(loss); }

const MethodArgSpec vicreg_arg_specs[] = {
    METHOD_ARG_DIM("hidden_dim"), METHOD_ARG_DIM("output_dim"), METHOD_ARG_WEIGHT("lambda"),
    METHOD_ARG_WEIGHT("mu"), METHOD_ARG_WEIGHT("nu"), METHOD_ARG_END,
};

int vicreg_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    double hidden, out, lambda, mu, nu;
    if (method_arg_double(setup, "hidden_dim", 8192, &hidden, err) ||
        method_arg_double(setup, "output_dim", 8192, &out, err) ||
        method_arg_double(setup, "lambda", 25.0, &lambda, err) ||
        method_arg_double(setup, "mu", 25.0, &mu, err) ||
        method_arg_double(setup, "nu", 1.0, &nu, err))
        return -1;
    VicregLoss *loss = vicreg_loss_create(method->backend, setup->batch, (int)out, (float)lambda,
                                          (float)mu, (float)nu, 1e-4f, err);
    if (!loss) return -1;
    const HeadSpec head = head_spec_vicreg(method->embed.dim, (int)hidden, (int)out);
    return pair_method_create(method, setup, &head,
                              (PairLoss){loss, vicreg_forward, vicreg_backward, vicreg_destroy},
                              err);
}
