// Projection and prediction heads of the SSL methods: small MLPs on top of
// the backbone's pooled features, mirroring lightly 1.6's heads
// (lightly/models/modules/heads.py) module by module, so that parameter names
// and values map one to one onto a lightly state_dict.
//
// Structure. A head is up to HEAD_MAX_LAYERS blocks, as lightly's
// ProjectionHead blocks: each block is Linear(in, out) (with a bias exactly
// where lightly has one: not when a BatchNorm follows), then optionally
// BatchNorm1d(out) (eps 1e-5, momentum 0.1, PyTorch's defaults) or
// LayerNorm(out) (eps 1e-5; LightlyTrain's DistillationV2Head), then
// optionally an activation (ReLU, or GELU in its exact erf form). lightly
// puts these modules in one nn.Sequential "layers", so the state_dict
// names count modules, activations included: a block starting at index k has
// "layers.k.weight" (Linear), "layers.k+1.weight/bias/running_mean/
// running_var" (BatchNorm) and the next block starts after its activation.
// E.g. SimCLR (Linear, BN, ReLU, Linear, BN): layers.0.weight,
// layers.1.{weight,bias,running_mean,running_var}, layers.3.weight,
// layers.4.{...}. DINO (Linear, GELU, Linear, GELU, Linear): layers.0/2/4
// .weight and .bias, then weight_norm_out > 0 adds F.normalize(dim=-1,
// eps=1e-12) and the weight-normalised last layer "last_layer.weight_v"
// (out, bottleneck): W = g v / ||v|| per output row with g fixed to 1
// (norm_last_layer=True; PyTorch's weight_norm has no eps), out = x W^T.
// weight_g is then not stored: it is constantly 1. With weight_g_trained
// (lightly's norm_last_layer=False, DINOv2's head, LightlyTrain's
// DINOv2ProjectionHead) g is the parameter "last_layer.weight_g" (out, 1),
// starting at 1 as theirs (filled after weight_norm), and trained.
//
// Gradient contract (as layers.h and backend.h): head_backward adds (+=)
// into the parameter gradients of params and last_layer, so micro-batches
// accumulate and the caller zeroes them between steps; dx is overwritten
// (=). Gradients are those of the last training-mode head_forward.
//
// Memory: head_create declares and allocates everything once, for up to
// max_rows rows: params and last_layer (values and gradients), buffers
// (BatchNorm running statistics), and one backend arena with every
// activation, the batch statistics, backward scratch and (DINO) the
// normalised weight W with its row norms and weight-gradient scratch.
// head_forward and head_backward allocate nothing.
//
// Initialisation (head_create): as lightly's heads are built in PyTorch.
// Linear layers get PyTorch's default nn.Linear init (layers.h linear_init:
// uniform +-1/sqrt(in) for weight and bias), or with HEAD_INIT_TRUNC_NORMAL
// (DINO's and DistillationV2Head's _init_weights) weights drawn from a
// normal with std 0.02 truncated to [-2, 2] (lightly's bounds are absolute
// values, i.e. +-100 std: in effect a plain normal) and biases 0, or with
// HEAD_INIT_TRUNC_NORMAL_WEIGHTS (LightlyTrain's distillation v1/v3
// projections: trunc_normal_ on the weight only) such weights and PyTorch's
// default biases. LayerNorm: weight 1, bias 0. DINO's last_layer is created after
// _init_weights in lightly, so weight_v keeps PyTorch's default init
// (uniform +-1/sqrt(bottleneck)). BatchNorm: weight 1, bias 0, running mean
// 0, running var 1. Random draws come from the counter-based RNG keyed by
// (a seed derived from seed and the head's name, the parameter name), so
// they depend on neither the backend nor declaration order, and two heads
// with different names differ.
#ifndef LTC_SSL_METHODS_HEADS_H
#define LTC_SSL_METHODS_HEADS_H

#include <stdint.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/parameters.h"
#include "util/error.h"

typedef enum HeadActivation { HEAD_ACT_NONE, HEAD_ACT_RELU, HEAD_ACT_GELU } HeadActivation;

#define HEAD_MAX_LAYERS 4

typedef enum HeadInit {
    HEAD_INIT_DEFAULT,               // PyTorch's nn.Linear init
    HEAD_INIT_TRUNC_NORMAL,          // weights trunc_normal_(std=0.02), biases 0
    HEAD_INIT_TRUNC_NORMAL_WEIGHTS,  // weights trunc_normal_(std=0.02), biases PyTorch's
} HeadInit;

typedef struct HeadLayerSpec {
    int in_features, out_features;
    int bias;        // the Linear has a bias
    int batch_norm;  // BatchNorm1d(out_features) after the Linear
    int layer_norm;  // LayerNorm(out_features) after the Linear (not with batch_norm)
    HeadActivation activation;
} HeadLayerSpec;

typedef struct HeadSpec {
    int layer_count;
    HeadLayerSpec layers[HEAD_MAX_LAYERS];
    // > 0 (DINO): after the layers, F.normalize(dim=-1, eps 1e-12) then a
    // weight-normalised Linear(last out -> weight_norm_out, no bias) with
    // weight_g fixed to 1, i.e. W = v / ||v|| per output row; 0: none
    int weight_norm_out;
    // with weight_norm_out: 1 makes weight_g a trained parameter (see above)
    int weight_g_trained;
    HeadInit init;  // of the Linear layers
} HeadSpec;

// lightly's heads (hidden/out as their constructor arguments):
HeadSpec head_spec_simclr(int in, int hidden, int out);           // SimCLRProjectionHead(num_layers=2, batch_norm=True)
HeadSpec head_spec_byol_projection(int in, int hidden, int out);  // BYOLProjectionHead
HeadSpec head_spec_byol_prediction(int in, int hidden, int out);  // BYOLPredictionHead
HeadSpec head_spec_vicreg(int in, int hidden, int out);           // VICRegProjectionHead(num_layers=3)
HeadSpec head_spec_barlow_twins(int in, int hidden, int out);     // BarlowTwinsProjectionHead
// DINOProjectionHead(batch_norm=False, norm_last_layer=True)
HeadSpec head_spec_dino(int in, int hidden, int bottleneck, int out);
// LightlyTrain's DINOv31 PaKA head (DINOv2's _build_mlp(3, in, hidden,
// bottleneck, use_bn=False), not re-initialised): Linear, GELU, Linear,
// GELU, Linear, PyTorch's default init
HeadSpec head_spec_paka(int in, int hidden, int bottleneck);
// One Linear with bias, PyTorch's default init: "layers.0.weight/bias"
HeadSpec head_spec_linear(int in, int out);
// LightlyTrain's distillation (v1, v3) student projection: one Linear with
// bias, weights trunc_normal_(std=0.02), PyTorch's default bias:
// "layers.0.weight/bias"
HeadSpec head_spec_distillation(int in, int out);
// LightlyTrain's DistillationV2Head(in, out, layers, hidden): one Linear, or
// layers - 1 blocks of Linear, LayerNorm, GELU (hidden wide) and a last
// Linear; trunc-normal weights, zero biases. layers in 1..HEAD_MAX_LAYERS.
HeadSpec head_spec_distillation_v2(int in, int hidden, int out, int layers);
// Width of the head's output (weight_norm_out or the last layer's out_features).
int head_spec_output_dim(const HeadSpec *spec);

// One block's layers and the activations it keeps for backward.
typedef struct HeadLayer {
    Linear linear;
    BatchNorm bn;               // used when batch_norm
    LayerNorm ln;               // used when layer_norm; statistics per row in
                                // save_mean / save_inv_std (max_rows)
    Act *linear_out;            // (max_rows, out)
    Act *bn_out;                // (max_rows, out) or NULL; with ReLU it holds relu(bn(.));
                                // the LayerNorm's output too
    Act *act_out;               // (max_rows, out): GELU output, or NULL
    float *save_mean, *save_inv_std;  // (out) batch statistics, or NULL
    Act *output;                // what the block hands on: one of the above
} HeadLayer;

typedef struct Head {
    Backend *backend;
    HeadSpec spec;
    int max_rows;
    // Trainable layers: PARAM_WEIGHT for Linear weights, PARAM_BIAS for their
    // biases, PARAM_NORM for BatchNorm weight/bias; names as lightly's state_dict.
    ParameterSet params;
    ParameterSet buffers;  // BatchNorm running_mean/running_var (may hold 0 entries)
    int64_t num_batches_tracked;
    // DINO's weight-normalised layer: PARAM_WEIGHT "last_layer.weight_v"
    // (out, bottleneck), then with weight_g_trained PARAM_WEIGHT
    // "last_layer.weight_g" (out, 1); 0 entries when spec.weight_norm_out
    // == 0. Separate so the caller can freeze it for the first steps.
    ParameterSet last_layer;

    // ---- private: set up by head_create, used by forward/backward --------------
    char name[64];            // for messages
    HeadLayer layers[HEAD_MAX_LAYERS];
    // The blocks run on activations (the backend's compute dtype); the
    // output, and DINO's weight-normalised layer from the normalisation on,
    // are fp32: the boundary between the model and the losses.
    void *arena;              // one backend allocation holding everything below
    float *mlp_out;           // (max_rows, last block's out) fp32 copy of the blocks' output
    float *normalized;        // (max_rows, bottleneck) F.normalize of the MLP output
    float *row_norms;         // (max_rows) its input's row norms
    float *weight;            // (out, bottleneck) W = v / ||v|| per row
    float *scaled_weight;     // (out, bottleneck) g W with weight_g_trained, else NULL:
                              // in weight_v_grad's memory, written by forward and
                              // again by backward before its use there
    float *ones;              // (bottleneck) 1s with weight_g_trained: row sums by GEMM
    float *weight_row_norms;  // (out) ||v|| per row
    float *weight_grad;       // (out, bottleneck) d loss / d W scratch
    float *weight_v_grad;     // (out, bottleneck) d loss / d v scratch, then added to the grad
    float *output;            // (max_rows, out dim) the DINO output (others: mlp_out)
    float *d_normalized;      // DINO: (max_rows, bottleneck) fp32 backward scratch
    float *d_mlp_out;         // DINO: (max_rows, bottleneck) fp32 d loss / d (blocks' output)
    Act *grad_scratch[2];     // (max_rows, widest) backward ping-pong
    const Act *input;         // x of the last training forward
    int rows;                 // rows of the last forward
    int backward_ready;       // the last forward was in training mode
} Head;

// Declares, allocates (everything, for up to max_rows rows) and initialises.
// name (e.g. "projection_head") keys the init RNG together with the
// parameter names, so two heads with the same spec and seed differ; it also
// prefixes error messages. Fails with a message on a bad spec (layer count
// outside 1..HEAD_MAX_LAYERS, widths < 1 or not chaining, unknown
// activation), max_rows < 1 or out of memory; the head is then freed.
int head_create(Head *head, Backend *backend, const HeadSpec *spec, const char *name,
                int max_rows, uint64_t seed, ErrorMessage *err);
void head_free(Head *head);

// Training-mode BatchNorm layers over all ranks of sync's communicator
// (nn/batchnorm_sync.h); NULL turns it off again. Heads without
// BatchNorm (DINO's) are left as they are.
int head_attach_batchnorm_sync(Head *head, BatchNormSync *sync, ErrorMessage *err);

// out (rows, output dim) = head(x (rows, in)), fp32 for the loss; the
// pointer (backend memory, owned by the head) stays valid until the next
// forward. training: BN uses batch statistics and updates running stats
// (and num_batches_tracked), and the head keeps what backward needs (x must
// stay unchanged until backward); otherwise running statistics. rows in
// 1..max_rows (BN in training needs rows >= 2): NULL with a message
// otherwise.
const float *head_forward(Head *head, int rows, const Act *x, int training, ErrorMessage *err);
// The last block's output of the last forward as activations (rows, last
// block's out): the input of a head that follows (BYOL's prediction head).
const Act *head_output_act(const Head *head);

// Gradient of the last training forward: parameter grads += (params and
// last_layer), dx (rows, in) = d loss/dx unless dx is NULL. dout (rows, out
// dim) is d loss/d out and is not modified. -1 with a message when the last
// forward was not a training forward.
int head_backward(Head *head, const float *dout, Act *dx, ErrorMessage *err);
// The same given dout as activations, the gradient of head_output_act
// (what a following head's backward gives); heads without the
// weight-normalised layer only.
int head_backward_act(Head *head, const Act *dout, Act *dx, ErrorMessage *err);

#endif
