# Typed declarations for the compiled build of intake.py (Cython's pure Python mode; the .py runs
# as it is without Cython): client_sampling runs once per submitted request; a C-level call.

cpdef tuple client_sampling(sim, flag_ignore_eos, mode)
