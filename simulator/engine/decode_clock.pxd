# Typed declarations for the compiled build of decode_clock.py (Cython's "pure Python mode": the
# .py stays the one source and runs as it is without Cython). Every number here is a C double or
# a 64-bit integer doing the .py's own operations in the .py's order, so the floats are the same
# bit for bit (setup.py builds without fused multiply-add).
cimport cython


cdef class DecodeClock:
    cdef list _starts
    cdef list _pieces
    cdef public long long steps
    cdef double _e
    cdef tuple _coeffs

    @cython.locals(
        fa=cython.double, fb=cython.double, sa=cython.double, sb=cython.double,
        a1=cython.double, b1=cython.double, a2=cython.double, b2=cython.double,
        a3=cython.double, b3=cython.double, a4=cython.double, b4=cython.double,
        t_c=cython.double, u=cython.longlong, lo=cython.longlong, hi=cython.longlong,
    )
    cpdef add(self, long long steps, double c, long long n, long long x0, long long y0, long long g)

    @cython.locals(mid=cython.double, alpha=cython.double, beta=cython.double,
                   length=cython.longlong, e=cython.double, pos=cython.longlong)
    cdef void _piece(self, long long u, long long v, double c, double a1, double b1, double a2,
                     double b2, double a3, double b3, double a4, double b4)

    @cython.locals(start=cython.longlong, e=cython.double, alpha=cython.double,
                   beta=cython.double, j=cython.double, v=cython.double, starts=list,
                   i=cython.Py_ssize_t)
    cpdef double end(self, long long step) except? -1.0

    cpdef double priced_end(self) except? -1.0

    @cython.locals(i=cython.Py_ssize_t, start=cython.longlong, length=cython.longlong,
                   e=cython.double, alpha=cython.double, beta=cython.double, d=cython.double,
                   b=cython.double, disc=cython.double, guess=cython.double)
    cpdef steps_ended_by(self, double t)


@cython.locals(i=cython.Py_ssize_t, x=cython.longlong, x0=cython.longlong, y0=cython.longlong,
               below=cython.longlong, members=list)
cpdef tuple segment_sums(list seqs, list last, long long a, long long w)

@cython.locals(i=cython.Py_ssize_t, x=cython.longlong, x0=cython.longlong, y0=cython.longlong,
               below=cython.longlong, members=list)
cpdef tuple segment_sums_from(list seqs, list last, list prev, long long a, long long w)
