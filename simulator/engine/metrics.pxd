# Typed declarations for the compiled build of metrics.py (Cython's pure-Python mode; the .py
# runs as it is without Cython): the recorder calls the round labels of rounds.py as C functions.
from simulator.engine.rounds cimport jump_constants, majority_round
