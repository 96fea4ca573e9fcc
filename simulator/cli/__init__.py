"""The ``kvplan`` command line: one module per subcommand, all thin wrappers over the library."""
