#!/usr/bin/env bash
# defines: the CPU kernels the pages' figures were made with, exported (sourced by scripts/course.sh,
# which scripts/run.sh runs the course with, and by the exercises' checks).
# The libraries under LibTorch pick their code by the CPU's vector instructions, and wider code
# adds in another order (README.md, "When a run fails"; Note [CPU kernels and the recorded figures]
# in tests/kernels.cpp). MKL's result is pinned on every CPU; OpenBLAS's and oneDNN's where the
# CPU has AVX2 and FMA (x86-64 flags; an arm64 CPU lists neither). A variable already set is kept.
export MKL_CBWR=${MKL_CBWR:-COMPATIBLE}
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} DNNL_MAX_CPU_ISA=${DNNL_MAX_CPU_ISA:-AVX2}
fi
