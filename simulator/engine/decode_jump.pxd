# Typed declarations for the compiled build of decode_jump.py (Cython's pure-Python mode: the .py
# stays the one source and runs as it is without Cython). The jump records become cdef classes
# with C integer fields; every value is an integer token or step count (no float arithmetic is
# typed here), so the records and the columns built from them are the same bit for bit.
cimport cython


cdef class JumpSegment:
    cdef public long long first
    cdef public long long end
    cdef public list batch
    cdef public long long full_base
    cdef public long long swa_base
    cdef public long long full_released
    cdef public long long swa_released


cdef class DecodeJump:
    cdef public object clock
    cdef public long long steps
    cdef public long long page_size
    cdef public list opens
    cdef public list swa_frees
    cdef public list segments
    cdef public long long queue


cdef class JumpColumns:
    cdef public long long steps
    cdef list _pieces
    cdef list _opens
    cdef list _frees
    cdef list _segs
    cdef list _released

    @cython.locals(g=cython.longlong, m=cython.longlong, start=cython.longlong,
                   length=cython.longlong, s=cython.longlong, pages=cython.longlong,
                   p=cython.longlong, seg=JumpSegment, pieces=list, opens=list, frees=list,
                   segs=list, released=list)
    cpdef add(self, DecodeJump jump)
