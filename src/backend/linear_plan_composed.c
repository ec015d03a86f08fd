// Planned linear layers as linear_forward then, for a GELU plan, gelu_forward
// in place (elementwise, so aliasing is allowed): see linear_plan_composed.h.
#include "backend/linear_plan_composed.h"

#include <stdlib.h>

struct LinearPlan {
    int rows, in, out, gelu;
};

LinearPlan *composed_linear_plan(Backend *backend, int rows, int in, int out, int gelu,
                                 ErrorMessage *err) {
    if (rows < 1 || in < 1 || out < 1) {
        error_set(err, "linear plan: %d rows of %d -> %d", rows, in, out);
        return NULL;
    }
    LinearPlan *plan = malloc(sizeof *plan);
    if (!plan) {
        error_set(err, "linear plan: out of memory");
        return NULL;
    }
    *plan = (LinearPlan){rows, in, out, gelu != 0};
    return plan;
}

void composed_linear_plan_free(Backend *backend, LinearPlan *plan) { free(plan); }

void composed_linear_planned_forward(Backend *backend, const LinearPlan *plan, const Act *x,
                                     const Act *w, const float *bias, Act *y) {
    backend->op.linear_forward(backend, plan->rows, plan->in, plan->out, x, w, bias, y);
    if (plan->gelu) backend->op.gelu_forward(backend, (size_t)plan->rows * plan->out, y, y);
}
