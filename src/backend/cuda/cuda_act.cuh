// The storage types of activations on the GPU (backend.h `Act`): float
// (32-true), __half (16-mixed) or __nv_bfloat16 (bf16-mixed). Kernels that
// read or write activations are templates on the storage type T: they load
// each value to float (act_load), compute in fp32 (or double where ref
// does), and store once with round to nearest even (act_store<T>), where
// the ref backend rounds (ref_round_acts). act_dispatch turns the backend's
// ComputeDtype into the type for a launch.
#ifndef LTC_BACKEND_CUDA_ACT_CUH
#define LTC_BACKEND_CUDA_ACT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_internal.h"

__device__ __forceinline__ float act_load(float v) { return v; }
__device__ __forceinline__ float act_load(__half v) { return __half2float(v); }
__device__ __forceinline__ float act_load(__nv_bfloat16 v) { return __bfloat162float(v); }

// float -> T, round to nearest even (fp16: overflow to infinity, NaN kept).
template <typename T>
__device__ __forceinline__ T act_store(float v);
template <>
__device__ __forceinline__ float act_store<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half act_store<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 act_store<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// A type carried as a value: act_dispatch calls fn(ActType<T>{}) and the
// generic lambda takes T back as `typename decltype(tag)::type`.
template <typename T>
struct ActType {
    using type = T;
};

template <typename Fn>
void act_dispatch(ComputeDtype dtype, Fn &&fn) {
    switch (dtype) {
    case COMPUTE_F16: fn(ActType<__half>{}); break;
    case COMPUTE_BF16: fn(ActType<__nv_bfloat16>{}); break;
    default: fn(ActType<float>{}); break;
    }
}

// Inside an act_dispatch lambda whose parameter is `tag`: T, the storage type.
#define ACT_T typename decltype(tag)::type

#endif
