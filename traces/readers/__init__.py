"""One module per public trace format; each streams its file into a canonical :class:`~traces.Trace`."""
