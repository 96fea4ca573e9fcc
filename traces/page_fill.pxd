# Typed declarations for the compiled build of page_fill.py (Cython's pure-Python mode; the .py
# runs as it is without Cython): the keys are written by a C loop over int64 memoryviews. Keys
# are below 2**62 (traces/pages.py checks), so no sum overflows and the keys are the same.
cimport cython


@cython.locals(p=cython.Py_ssize_t, j=cython.Py_ssize_t, v=cython.longlong, m=cython.longlong)
cpdef fill_keys(long long[::1] keys, const long long[::1] base, const long long[::1] n,
                long long page_size)
