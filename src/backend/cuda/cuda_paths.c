// The cuda backend's describe_paths op (backend.h): which of its fused
// paths the plans made so far take, for train.log's "backend paths:" line
// and bench_train_step's "paths:" line (cuda_attention.cu and cuda_conv.c
// count them in the backend's state), and the device memory the program
// holds (cuda_memory.c).
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

// The convolutions' part of the paths line: how many plans fuse the
// forward with BatchNorm's statistics, and the first reason one does not.
static void describe_convolutions(const CudaState *s, char *text, size_t size) {
    const size_t used = strlen(text);
    if (!s->conv_plans || used + 1 >= size) return;
    snprintf(text + used, size - used, "%sconvolutions: cuDNN conv + BatchNorm statistics graphs "
                                       "for %d of %d plans%s%s%s", used ? "; " : "",
             s->conv_stats_plans, s->conv_plans,
             s->conv_stats_plans == s->conv_plans ? "" : " (the rest separate: ",
             s->conv_stats_plans == s->conv_plans ? "" : s->conv_fallback_reason,
             s->conv_stats_plans == s->conv_plans ? "" : ")");
    const size_t now = strlen(text);
    if (!s->conv_stats_plans || now + 1 >= size) return;
    snprintf(text + now, size - now, ", with the previous BatchNorm + ReLU in the prologue "
                                     "(forward and weight gradient) for %d%s%s%s",
             s->conv_prologue_plans,
             s->conv_prologue_plans == s->conv_stats_plans ? "" : " (the rest not: ",
             s->conv_prologue_plans == s->conv_stats_plans ? "" : s->conv_prologue_reason,
             s->conv_prologue_plans == s->conv_stats_plans ? "" : ")");
    const size_t last = strlen(text);
    if (!s->conv_prologue_plans || last + 1 >= size) return;
    const int all = s->conv_data_prologue_plans == s->conv_prologue_plans;
    snprintf(text + last, size - last,
             ", and the data gradient through that ReLU with the norm's reduction for %d%s%s%s",
             s->conv_data_prologue_plans, all ? "" : " (the rest not: ",
             all ? "" : s->conv_data_prologue_reason, all ? "" : ")");
}

// Which path the attention plans made so far take (cuda_attention.cu).
static void describe_attention(const Backend *backend, char *text, size_t size) {
    const CudaState *s = cuda_state(backend);
    text[0] = '\0';
    if (backend->compute_dtype == COMPUTE_F32 || !s->attention_plans) {
        if (s->attention_plans)
            snprintf(text, size, "attention: fp32 tile kernels (%d plans)", s->attention_plans);
        return;
    }
    const int sdpa_both = s->attention_sdpa_forward == s->attention_plans &&
                          s->attention_sdpa_backward == s->attention_plans;
    snprintf(text, size, "attention: cuDNN SDPA graphs for %d of %d plans forward, %d backward"
                         "%s%s%s", s->attention_sdpa_forward, s->attention_plans,
             s->attention_sdpa_backward,
             sdpa_both ? "" : "; the rest batched GEMMs on cuBLAS (",
             sdpa_both ? "" : (s->attention_fallback_reason[0] ? s->attention_fallback_reason
                                                              : "LTC_CUDA_ATTENTION"),
             sdpa_both ? "" : ")");
}

// What the program holds on the device: the alloc op's peak (parameters,
// gradients, optimizer state, activation arenas, plans' buffers) and the
// plans' shared workspace, in MiB; the process holds more (CUDA's context,
// the libraries').
static void describe_memory(const Backend *backend, char *text, size_t size) {
    size_t live, peak, workspace;
    cuda_backend_memory(backend, &live, &peak, &workspace);
    const size_t used = strlen(text);
    if (used + 1 >= size) return;
    snprintf(text + used, size - used, "%sdevice memory: %.0f MiB allocated at most, %.0f MiB "
                                       "workspace", used ? "; " : "", peak / 1048576.0,
             workspace / 1048576.0);
}

void cuda_describe_paths(const Backend *backend, char *text, size_t size) {
    describe_attention(backend, text, size);
    describe_convolutions(cuda_state(backend), text, size);
    describe_memory(backend, text, size);
}
