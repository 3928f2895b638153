"""Rendering of what `reports.analysis` built: HTML (logic-free Jinja2 templates), Plotly
figures, text, Markdown and JUnit. Decides how things look, never what they are."""
