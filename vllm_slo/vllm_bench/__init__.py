"""`vllm-slo import vllm-bench`: saved `vllm bench serve --save-result --save-detailed` files
turned into run folders, so `report`, `compare`, `gate` and `plan` work on them.

- `records.py`: reading and validating a result file: its records (several with
  `--append-result`), the per-request columns checked key by key (`BenchFileError` names the
  file and the key);
- `rows.py`: a record's requests as rows of the samples schema: intended and actual send times
  (recorded, or reconstructed for older files), slot waits, failures in the suite's words;
- `run_folder.py`: one complete run folder from one record: the time anchor, a trial scenario
  describing what vLLM bench did, provenance, status, samples and a copy of the record;
- `command.py`: the command: files and labels assigned to trials and variants, the experiment
  scenario, writing and rendering.
"""
