"""The conformance of real runs: the change feed and ``courier conform`` (issue 34)."""
