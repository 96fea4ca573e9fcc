# Typed declarations for the compiled build of waiting_queue.py (Cython's pure Python mode; the .py
# runs as it is without Cython). The queue itself stays a deque subclass; the check that a prefill
# batch's admitted requests are the queue's head is a C loop.
cimport cython


@cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t)
cpdef bint _is_head(list admitted, object queue) except -1
