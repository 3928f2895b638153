"""The bottom layer, the suite's vocabulary: the scenario model and loader, the SLO grammar,
the metric registry, units, errors and exit codes. Imports nothing else of the suite
(tests/unit/test_layers.py)."""
