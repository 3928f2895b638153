"""The run folder's format: file names (`run_files`), the samples' columnar schema
(`samples_format`), provenance, run status and the Locust configuration written beside them.
docs/run-folder.md describes the folder as users meet it.
"""
