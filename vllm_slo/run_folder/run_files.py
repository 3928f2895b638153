"""Names of the files in a run folder (`runs/<UTC timestamp>-<scenario>/`), and of the
folders an experiment, tune or capacity search keeps its runs in."""

SCENARIO_FILE = "scenario.yaml"  # the resolved scenario (file + overrides), re-runnable
PROVENANCE_FILE = "provenance.json"  # vLLM version, engine args, host, git commit, seed
STATUS_FILE = "run_status.json"  # server/load-generator failures, interruption
LOCUST_CONFIG_FILE = "locust_config.json"  # what the Locust processes read at start
REMOTE_WORKERS_FILE = "remote_workers.json"  # remote workers: joined, rows, losses, strays
SERVER_LOG_FILE = "server.log"
LOCUST_LOG_FILE = "locust.log"
SERVER_METRICS_FILE = "server_metrics.jsonl"  # /metrics scrapes, one JSON line each
SERVER_FACTS_FILE = "server_facts.json"  # KV cache, resolved config: the server's own words
SUMMARY_FILE = "summary.json"
JUNIT_FILE = "junit.xml"  # one testcase per SLO (vllm_slo/reports/render/junit.py)
SUMMARY_MD_FILE = "summary.md"  # short Markdown digest (vllm_slo/reports/render/markdown.py)
REPORT_FILE = "report.html"
PLAN_FILE = "requests.parquet"  # the pre-sampled request plan (prompts, max_tokens), in order
TRIALS_DIR = "trials"  # experiments: one complete run folder per trial
TUNE_SCENARIO_FILE = "tune.yaml"  # tunes: the scenario as given, its tune section included
CANDIDATES_FILE = "candidates.json"  # tunes: candidate name -> server args, origin
START_FAILURE_FILE = "start_failure.json"  # a tune's trial whose server did not come up
TUNE_SUMMARY_FILE = "tune.json"  # tunes: ranking, Pareto front, searches, recommendation
TUNE_REPORT_FILE = "tune.html"
RECOMMENDED_CONFIG_FILE = "recommended.yaml"  # vLLM --config format
RECOMMENDED_COMMAND_FILE = "recommended-command.txt"
STOPPING_FILE = "stopping.json"  # experiments: rounds run, why they ended (resume reads it)
CAPACITY_FILE = "capacity.json"  # capacity searches: the steps, the bracket, the verdict
VARIANTS_DIR = "variants"  # capacity searches and races: a capacity folder per variant
RACE_FILE = "race.json"  # a capacity race's standings (tune.objective: capacity)


def trial_folder_name(position: int, variant: str, trial: int) -> str:
    """`trials/<NNN>-<variant>-<k>/`: the position in run order, the variant (`run` for a
    scenario without variants), the variant's trial number from 1."""
    return f"{position:03d}-{variant or 'run'}-{trial}"
