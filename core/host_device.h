// RG_HD marks element math that the CPU kernels and the CUDA kernels share: compiled as plain
// inline C++ by g++, as __host__ __device__ by nvcc, so CPU tests exercise the same code.
#pragma once
#if defined(__CUDACC__)
#define RG_HD __host__ __device__ __forceinline__
#else
#define RG_HD inline
#endif
