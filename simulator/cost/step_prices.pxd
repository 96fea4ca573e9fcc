# Typed declarations for the compiled build of step_prices.py (Cython's pure Python mode; the .py
# runs as it is without Cython). Every constant and every intermediate is a C double doing the
# .py's operations in its order (setup.py builds without fused multiply-add): the same IEEE
# results as Python's floats (an int-valued constant below 2**53 converts exactly).
cimport cython


cdef class StepPrices:
    cdef public double dense_flops_per_token
    cdef public double lm_head_flops_per_request
    cdef public double dense_flops_rate
    cdef public double dense_m
    cdef public double dense_unhidden
    cdef public double num_experts
    cdef public double miss_per_token
    cdef public object experts_per_token
    cdef public double moe_half_tokens
    cdef public double moe_flops_per_token
    cdef public double moe_flops_rate
    cdef public double expert_bytes
    cdef public double weight_bw
    cdef public double moe_unhidden
    cdef public object moe_tile
    cdef public object moe_decode_tile
    cdef public double full_flops_per_pair
    cdef public double swa_flops_per_pair
    cdef public double attn_flops_rate
    cdef public double full_kv_bytes
    cdef public double swa_kv_bytes
    cdef public double kv_bw
    cdef public double prefill_attn_unhidden
    cdef public double allreduce_count
    cdef public double allreduce_latency
    cdef public double allreduce_s_per_token
    cdef public double decode_fixed
    cdef public double decode_per_request
    cdef public double prefill_fixed
    cdef public double prefill_per_request


@cython.locals(dense_c=cython.double, dense_m=cython.double, dense=cython.double,
               touched=cython.double, n=cython.double, moe_c=cython.double,
               moe_m=cython.double, moe=cython.double)
cpdef (double, double) linear_parts(StepPrices h, double tokens, double requests, object tile)

@cython.locals(allreduce=cython.double, overhead=cython.double)
cpdef (double, double) fixed_parts(StepPrices h, double tokens, double requests, bint decode)

@cython.locals(attn_full=cython.double, attn_swa=cython.double)
cpdef (double, double) attention_parts(StepPrices h, double full_pairs, double swa_pairs,
                                       double full_read, double swa_read, double written)

@cython.locals(f=cython.double, full_c=cython.double, full_m=cython.double,
               swa_c=cython.double, swa_m=cython.double)
cpdef (double, double) attention_unhidden(StepPrices h, double attn_full, double attn_swa,
                                          double full_pairs, double swa_pairs, double full_read,
                                          double swa_read, double written)

@cython.locals(n=cython.double, dense=cython.double, moe=cython.double, attn_full=cython.double,
               attn_swa=cython.double, allreduce=cython.double, overhead=cython.double)
cpdef double decode_seconds(StepPrices h, object bs, double full_ctx, double swa_ctx) except? -1.0

@cython.locals(dense=cython.double, moe=cython.double, attn_full=cython.double,
               attn_swa=cython.double, allreduce=cython.double, overhead=cython.double)
cpdef (double, double, double, double, double, double) prefill_parts(
    StepPrices h, double tokens, double requests, double full_pairs, double swa_pairs,
    double full_read, double swa_read)

@cython.locals(dense=cython.double, moe=cython.double, attn_full=cython.double,
               attn_swa=cython.double, allreduce=cython.double, overhead=cython.double)
cpdef double prefill_seconds(StepPrices h, double tokens, double requests, double full_pairs,
                             double swa_pairs, double full_read, double swa_read) except? -1.0
