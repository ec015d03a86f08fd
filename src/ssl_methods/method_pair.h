// The shape SimCLR, VICReg and Barlow Twins share: one backbone and one
// projection head run on the two views concatenated, and a loss of the two
// halves of the projections (out0, out1), whose forward and backward have the
// same form for all three. Each method's file picks the head, the loss and
// the defaults, and calls pair_method_create.
#ifndef LTC_SSL_METHODS_METHOD_PAIR_H
#define LTC_SSL_METHODS_METHOD_PAIR_H

#include "ssl_methods/heads.h"
#include "ssl_methods/method.h"

// A loss of two (batch, dim) projections: forward writes the loss into
// *value (one float of backend memory), backward writes d0, d1 (batch, dim)
// = dloss * gradients.
typedef struct PairLoss {
    void *loss;
    void (*forward)(void *loss, int batch, const float *out0, const float *out1, float *value);
    void (*backward)(void *loss, float dloss, float *d0, float *d1);
    void (*destroy)(void *loss);
} PairLoss;

// Takes ownership of loss (destroyed with the method, also on failure).
int pair_method_create(Method *method, const MethodSetup *setup, const HeadSpec *head,
                       PairLoss loss, ErrorMessage *err);

#endif
