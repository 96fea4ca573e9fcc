# Typed declarations for the compiled build of step_costs.py (Cython's pure Python mode; the .py
# runs as it is without Cython): StepCosts is a cdef class, so the scheduler reaches its memos
# without dictionary look-ups. The prices themselves come from the cost model unchanged.
cimport cython


cdef class StepCosts:
    cdef public object cost
    cdef public Py_ssize_t memo_size
    cdef dict _prefill_memo
    cdef dict _terms_memo

    @cython.locals(memo=dict)
    cpdef prefill_time(self, extend, prefix)

    @cython.locals(terms=tuple)
    cpdef tuple decode_terms(self, bs)
