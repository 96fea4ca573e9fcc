# Typed declarations for the compiled build of request_kv.py (Cython's "pure Python mode": the .py
# stays the one source and runs as it is without Cython). The request's lengths are C 64-bit
# integers, read and written by the compiled engine without dictionary look-ups; everything else
# stays a Python object. ``public`` keeps every attribute readable and writable from Python.
# Other compiled modules type their requests with
#     from simulator.request_kv cimport ReqKV, LockReceipt


cdef class LockReceipt:
    cdef public object node
    cdef public object swa_uuid


cdef class ReqKV:
    cdef public object rid
    cdef public object pages
    cdef public long long prompt_len
    cdef public long long output_len
    cdef public long long kv_allocated_len
    cdef public long long cache_protected_len
    cdef public long long swa_evicted_seqlen
    cdef public long long cache_inserted_len
    cdef public long long prefix_len
    cdef public long long cached_tokens
    cdef public long long num_outputs
    cdef public long long fill_len
    cdef public long long extend_end
    cdef public long long already_computed
    cdef public bint retracted_stain
    cdef public long long decode_batch_idx
    cdef public object swa_branching_seqlen
    cdef public object last_node
    cdef public object lock
    cdef public bint holds_kv
    cdef public object kv_pages
    cdef public object best_match_node
    cdef public long long host_hit_length
    cdef public long long swa_host_hit_length
    cdef public long long host_loaded_length

    cpdef long long swa_dead_lo(self, long long page_size)
    cpdef long long private_full_tokens(self, long long page_size)
    cpdef long long private_swa_tokens(self, long long page_size)
