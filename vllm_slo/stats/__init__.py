"""Statistics: pure functions over arrays (numpy and scipy only), returning small frozen results.

Percentile and rate estimates with intervals (`statistics`), effective sample sizes under
autocorrelation (`effective_size`), per-trial tests and intervals (`trial_statistics`), how many
trials a comparison needs (`trial_planning`) and the sequential stopping rule (`sequential`).
Nothing here reads files, prints, or imports the rest of the suite (tests/unit/test_layers.py).
"""
