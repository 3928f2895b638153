"""Rendering of what `vllm_slo.analysis` built: HTML (logic-free Jinja2 templates), Plotly
figures, text, Markdown and JUnit. Decides how things look, never what they are."""
