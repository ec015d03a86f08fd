// The planned linear layer of backend.h (linear_plan, linear_planned_forward)
// composed from a backend's own linear_forward and gelu_forward: the ref and
// cuda backends' (the cpu backend fuses it on oneDNN: cpu_linear_plan.c).
#ifndef LTC_BACKEND_LINEAR_PLAN_COMPOSED_H
#define LTC_BACKEND_LINEAR_PLAN_COMPOSED_H

#include "backend/backend.h"

LinearPlan *composed_linear_plan(Backend *backend, int rows, int in, int out, int gelu,
                                 ErrorMessage *err);
void composed_linear_plan_free(Backend *backend, LinearPlan *plan);
void composed_linear_planned_forward(Backend *backend, const LinearPlan *plan, const Act *x,
                                     const Act *w, const float *bias, Act *y);

#endif
