# Typed declarations for the compiled build of record_pack.py (Cython's pure-Python mode; the .py
# runs as it is without Cython): the packing and grouping loops run on C arrays. Every value is
# converted once, as numpy's float64 setitem converts it, and moved, never recomputed.
cimport cython


@cython.locals(n=cython.Py_ssize_t)
cpdef object float_rows(list rows, Py_ssize_t width)

@cython.locals(i=cython.Py_ssize_t, j=cython.Py_ssize_t, row=tuple, iv=cython.longlong)
cpdef _fill(double[:, ::1] out, list rows, Py_ssize_t width)

@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, k=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, a_out=cython.double[::1], b_out=cython.double[::1])
cpdef tuple _scatter(const long long[::1] keys, const double[::1] a, const double[::1] b,
                     long long[::1] starts, long long lo)
