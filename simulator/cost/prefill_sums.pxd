# Typed declarations for the compiled build of prefill_sums.py (Cython's pure Python mode; the .py
# runs as it is without Cython). The lengths are C doubles: a token count below 2**53 converts
# exactly, and every product and sum of two exact doubles is the correctly rounded result that
# Python's int/float arithmetic gives too, in the .py's order (setup.py builds without fused
# multiply-add), so the sums are the same bit for bit.
cimport cython


cpdef double capped_triangle_1(double n, double w)


@cython.locals(
    tokens=cython.double, requests=cython.double, full_pairs=cython.double,
    swa_pairs=cython.double, full_read=cython.double, swa_read=cython.double, wf=cython.double,
    e=cython.double, p=cython.double, n=cython.Py_ssize_t, i=cython.Py_ssize_t,
)
cpdef tuple prefill_sums_loop(extend, prefix, window)
