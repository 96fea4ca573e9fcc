# Typed declarations for the compiled build of mooncake_lines.py (Cython's pure-Python mode; the
# .py runs as it is without Cython): the line's bytes are read through a typed view and the
# numbers are accumulated in C integers of at most 18 digits (longer ones go through int()), so
# every value is the one the .py computes.
cimport cython

cdef int _TIMESTAMP, _INPUT, _OUTPUT, _HASH_IDS
cdef Py_ssize_t _SAFE_DIGITS
cdef long long _MAX_TOKENS


@cython.locals(m=cython.Py_ssize_t, k=cython.Py_ssize_t, start=cython.Py_ssize_t,
               end=cython.Py_ssize_t, joined=str, lines="long long[::1]", ts="double[::1]",
               n_in="long long[::1]", n_out="long long[::1]", counts="long long[::1]",
               scanner=LineScanner, lineno=cython.longlong, text=str)
cpdef object scan_lines(list chunk, long long block_size)


cdef class LineScanner:
    cdef public object hashes_array
    cdef long long[::1] hashes
    cdef public Py_ssize_t h
    cdef Py_ssize_t cap
    cdef bytes data
    cdef const unsigned char[::1] text
    cdef Py_ssize_t n
    cdef Py_ssize_t i
    cdef public double t
    cdef public long long n_in
    cdef public long long n_out
    cdef public long long ids
    cdef public long long value

    @cython.locals(seen=cython.int, key=cython.int, c=cython.int, rest=cython.Py_ssize_t)
    cdef bint record(self, Py_ssize_t start, Py_ssize_t end) except -1

    cdef bint field(self, int key) except -1

    @cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, c=cython.int)
    cdef int skip_ws(self)

    @cython.locals(start=cython.Py_ssize_t, end=cython.Py_ssize_t)
    cdef int key(self) except -1

    @cython.locals(k=cython.Py_ssize_t)
    cdef bint spells(self, Py_ssize_t start, Py_ssize_t end, bytes word) except -1

    cdef bint colon(self)

    @cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, v=cython.longlong, c=cython.int,
                   count=cython.Py_ssize_t)
    cdef Py_ssize_t digits(self)

    @cython.locals(start=cython.Py_ssize_t, negative=bint, count=cython.Py_ssize_t)
    cdef bint integer(self) except -1

    @cython.locals(start=cython.Py_ssize_t, t=cython.double)
    cdef bint timestamp(self) except -1

    @cython.locals(i=cython.Py_ssize_t, count=cython.Py_ssize_t)
    cdef Py_ssize_t fraction_digits(self)

    @cython.locals(first=cython.Py_ssize_t, c=cython.int)
    cdef bint id_list(self) except -1
