"""The discrete-event serving simulator: clients -> SGLang server model -> metrics.

``request.SimRequest`` is the unit that flows through it; ``server.ServerModel`` (scheduler +
cache + cost model) serves requests submitted by the client processes in ``clients``; a
``metrics.Recorder`` observes the server and builds the results.
"""
