"""The locustfile of vllm-slo: the users live in the package (vllm_slo/loadtests/users.py);
this file is what Locust is pointed at. The suite runs

    locust -f loadtests/locustfile.py --headless --host URL -u N -r R -t T \
        --vllm-slo-run-dir runs/<id> ClosedLoopUser|OpenLoopUser

and it works by hand the same way against a server you attach to (it reads
`<run-dir>/locust_config.json` and `<run-dir>/requests.parquet`, written by the suite, e.g. by a
`vllm-slo run` of the same scenario). Locust's own statistics feed its console only; every
reported number comes from the rows written to `<run-dir>/samples/`. A remote worker
(`vllm-slo worker --master HOST:PORT`, for `traffic.remote_workers`) runs it with no run
folder: its master sends the config and plan and writes the rows it sends back.
"""

from vllm_slo.loadtests.users import ClosedLoopUser, OpenLoopUser  # noqa: F401  (Locust's users)
