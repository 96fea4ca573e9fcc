# Typed declarations for the compiled build of observer.py (Cython's pure-Python mode; the .py
# runs as it is without Cython): ServerObserver is a cdef class so that metrics.Recorder can be
# one (metrics.pxd). Its hooks stay Python methods: a subclass in Python overrides them as before.


cdef class ServerObserver:
    pass
