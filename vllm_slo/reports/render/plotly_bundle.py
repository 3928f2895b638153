"""The plotly.js every report page inlines: the basic partial bundle (scatter, bar, pie;
1.2 MB instead of the full 4.8 MB), vendored under `vendor/` (version, source and MIT licence
in reports/vendor/README.md), so a page opens offline and a small run's report stays near 1.3 MB."""

from __future__ import annotations

import functools

from vllm_slo.resources import user_folder

PLOTLY_JS_VERSION = "4.1.1"
BUNDLE_PATH = user_folder("reports") / "vendor" / "plotly-basic.min.js"
#: Plotly trace types the bundle registers; every figure of every page must stay inside them.
BUNDLE_TRACE_TYPES = frozenset({"scatter", "bar", "pie"})


@functools.cache
def plotly_js() -> str:
    """The bundle's source, to inline in a <script> element (it contains no `</script`)."""
    text = BUNDLE_PATH.read_text(encoding="utf-8")
    if "</script" in text.lower():
        raise ValueError(f"{BUNDLE_PATH} contains '</script' and cannot be inlined")
    return text
