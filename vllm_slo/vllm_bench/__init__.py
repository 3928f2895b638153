"""`vllm-slo import vllm-bench`: saved `vllm bench serve` result files as run folders."""
