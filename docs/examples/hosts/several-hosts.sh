#!/bin/sh
# Load from several plain hosts (VMs, CI runners): the suite's wheel on each, nothing shared.
# Lines starting with `vllm-slo` are the commands; tests/unit/test_deployment_examples.py
# parses them with the suite's own command-line parser.

# 1. on every host
pip install vllm_slo-*.whl

# 2. on the master host (10.0.0.5), which holds the run folder: open the master on its
#    address; the run prints the worker command with this run's token and waits
vllm-slo run scenario=chat server.url=http://10.0.0.9:8000 traffic.remote_workers=2 traffic.master_bind=10.0.0.5 traffic.master_port=5557

# 3. on each of the 2 worker hosts, the printed command (the token is the run's own)
vllm-slo worker --master 10.0.0.5:5557 --token=PRINTED-TOKEN
