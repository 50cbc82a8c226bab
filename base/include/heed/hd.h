// heed/hd.h — HEED_HD (a function compiled for host and device) and the scalar math
// both backends call, so a formula written once computes the same thing on the CPU, on the GPU
// and in the CPU emulator of the CUDA kernels.
//
// Invariants: math_* in float call the float functions (expf, ...), in double the double
// ones: the CPU kernels' std:: calls resolve to the same functions, so moving a formula into a
// HEED_HD row changes no result. Includes nothing from framework/.
#pragma once

#include <cmath>

#ifndef HEED_HD
#if defined(__CUDACC__)
#define HEED_HD __host__ __device__ __forceinline__
#else
#define HEED_HD inline  // host compilers, the CUDA emulator's included
#endif
#endif

namespace heed::kernels {

HEED_HD float math_exp(float x) { return ::expf(x); }
HEED_HD double math_exp(double x) { return ::exp(x); }
HEED_HD float math_log(float x) { return ::logf(x); }
HEED_HD double math_log(double x) { return ::log(x); }
HEED_HD float math_log1p(float x) { return ::log1pf(x); }
HEED_HD double math_log1p(double x) { return ::log1p(x); }
HEED_HD float math_sqrt(float x) { return ::sqrtf(x); }
HEED_HD double math_sqrt(double x) { return ::sqrt(x); }
HEED_HD float math_tanh(float x) { return ::tanhf(x); }
HEED_HD double math_tanh(double x) { return ::tanh(x); }
HEED_HD float math_erf(float x) { return ::erff(x); }
HEED_HD double math_erf(double x) { return ::erf(x); }
HEED_HD float math_pow(float x, float y) { return ::powf(x, y); }
HEED_HD double math_pow(double x, double y) { return ::pow(x, y); }

}  // namespace heed::kernels
