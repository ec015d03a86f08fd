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
#include <stdint.h>

#include <initializer_list>

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

// ---- V consecutive activations in one load ------------------------------------------
// A memory-bound kernel whose threads each load one 2-byte element keeps
// too few bytes in flight to reach the GPU's bandwidth (Little's law: some
// 3 MB must be in flight on an H100, a full GPU of threads holds 0.5 MB of
// 2-byte loads); 16 bytes per load (8 fp16 / bf16 or 4 fp32 values) holds
// 4 MB. act_load_vector / act_store_vector move V values of T as one load
// or store: the address must be aligned to V * sizeof(T) (act_vector_fits).

// The widest vector: 16 bytes of T.
template <typename T>
constexpr int act_vector_width() {
    return (int)(16 / sizeof(T));
}

template <typename T, int V>
struct __align__(sizeof(T) * V) ActVector {
    T value[V];
};

// A GPU stops a kernel at a vector access whose address is not a multiple
// of its size ("misaligned address"); the x86 CPU that runs the CUDA
// emulation would not notice, so the emulation defines this to check it.
#ifndef LTC_DEVICE_CHECK_ALIGNED
#define LTC_DEVICE_CHECK_ALIGNED(pointer, bytes) ((void)0)
#endif

// V values of any T (activations, int32 indices) as they are stored.
template <typename T, int V>
__device__ __forceinline__ ActVector<T, V> load_packed(const T *p) {
    LTC_DEVICE_CHECK_ALIGNED(p, sizeof(ActVector<T, V>));
    return *reinterpret_cast<const ActVector<T, V> *>(p);
}

template <typename T, int V>
__device__ __forceinline__ void store_packed(T *p, const ActVector<T, V> &packed) {
    LTC_DEVICE_CHECK_ALIGNED(p, sizeof(ActVector<T, V>));
    *reinterpret_cast<ActVector<T, V> *>(p) = packed;
}

template <typename T, int V>
__device__ __forceinline__ void act_load_vector(const T *p, float out[V]) {
    const ActVector<T, V> packed = load_packed<T, V>(p);
    for (int v = 0; v < V; v++) out[v] = act_load(packed.value[v]);
}

template <typename T, int V>
__device__ __forceinline__ void act_store_vector(T *p, const float in[V]) {
    ActVector<T, V> packed;
    for (int v = 0; v < V; v++) packed.value[v] = act_store<T>(in[v]);
    store_packed<T, V>(p, packed);
}

// Whether rows of `channels` values of T (or one row of n) at each of the
// pointers (NULL: no tensor) can be read width at a time: channels a
// multiple of width and every pointer aligned to width values.
template <typename T>
bool act_vector_fits(size_t channels, int width, std::initializer_list<const void *> pointers) {
    if (channels % (size_t)width != 0) return false;
    for (const void *p : pointers)
        if ((uintptr_t)p % (width * sizeof(T)) != 0) return false;
    return true;
}

// fn(Width<V>{}) with V = the widest vector when `fits`, else 1; the
// lambda takes V back as decltype(width)::value.
template <int V>
struct Width {
    static constexpr int value = V;
};

template <typename T, typename Fn>
void act_width_dispatch(bool fits, Fn &&fn) {
    if (fits)
        fn(Width<act_vector_width<T>()>{});
    else
        fn(Width<1>{});
}

// For a kernel over n values of T, V per thread: launch(Width<V>{}, n / V)
// with the widest V where n and every pointer allow it, else V = 1.
template <typename T, typename Launch>
void over_vectors(size_t n, std::initializer_list<const void *> pointers, Launch &&launch) {
    act_width_dispatch<T>(act_vector_fits<T>(n, act_vector_width<T>(), pointers),
                          [&](auto width) { launch(width, n / decltype(width)::value); });
}

#endif
