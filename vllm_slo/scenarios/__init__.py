"""The bottom layer, the suite's vocabulary: the scenario model and loader, the SLO grammar,
units, errors and exit codes, run-folder file names, the per-request row format, and the
shipped scenario files (*.yaml). Imports nothing else of the suite (README "Layout")."""
