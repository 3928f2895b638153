"""Modules that extend the registries — a rate metric (`metrics.register_metric`), a traffic
profile (`profile_specs.register_profile_spec` and `loadtests.profiles.register_profile`) —
named by the environment variable VLLM_SLO_PLUGINS (module names, comma-separated, importable
where the suite runs). Every process that reads a scenario imports them first: the CLI, and
each Locust process (which inherits the variable). So a registered metric or profile is known
to the run, to its load generator and to `vllm-slo report` on the folder later; a module that
cannot be imported is a usage error naming it (exit 2)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

from vllm_slo.scenarios.errors import ScenarioError

PLUGINS_ENV = "VLLM_SLO_PLUGINS"


def plugin_names(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The module names VLLM_SLO_PLUGINS lists (none: empty)."""
    text = (os.environ if environ is None else environ).get(PLUGINS_ENV, "")
    return tuple(name.strip() for name in text.split(",") if name.strip())


def load_plugins(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Imports every module VLLM_SLO_PLUGINS names (once per process: imports are cached);
    returns their names. ScenarioError naming the variable and the module otherwise."""
    names = plugin_names(environ)
    for name in names:
        try:
            importlib.import_module(name)
        except KeyboardInterrupt:  # a real Ctrl-C stops the suite, as anywhere else
            raise
        except Exception as error:  # a plugin's own failure is the user's to see, in one line
            raise ScenarioError(f"{PLUGINS_ENV}: cannot import {name!r}: "
                                f"{type(error).__name__}: {error}") from None
        except BaseException as error:  # sys.exit() at import: never the suite's exit code
            raise ScenarioError(f"{PLUGINS_ENV}: cannot import {name!r}: plugin {name} "
                                f"raised {raised_text(error)}") from None
    return names


def raised_text(error: BaseException) -> str:
    """An exception in one line for a message: `SystemExit(0)`, `ValueError('no')`."""
    return " ".join(repr(error).split())[:300]


def plugin_in_traceback(error: BaseException,
                        environ: Mapping[str, str] | None = None) -> str | None:
    """The innermost module VLLM_SLO_PLUGINS names (or one of its submodules) in the
    traceback of `error`: which plugin raised it; None when none did."""
    names = plugin_names(environ)
    found = None
    frame_info = error.__traceback__
    while frame_info is not None:
        module = frame_info.tb_frame.f_globals.get("__name__", "")
        for name in names:
            if module == name or module.startswith(f"{name}."):
                found = name
        frame_info = frame_info.tb_next
    return found


def unregistered_hint(document: object) -> str:
    """For a saved scenario that names metrics or profiles this process has not registered
    (a run made with plugins, read without them): which, and what to set; "" otherwise."""
    from vllm_slo.scenarios.metrics import METRICS
    from vllm_slo.scenarios.profile_specs import PROFILE_SPECS

    if not isinstance(document, Mapping):
        return ""
    slo = document.get("slo")
    traffic = document.get("traffic")
    missing = [f"slo.{key}" for key in (slo if isinstance(slo, Mapping) else {})
               if key not in METRICS and key not in ("by_profile", "by_adapter")]
    profile = traffic.get("profile") if isinstance(traffic, Mapping) else None
    if isinstance(profile, str) and profile not in PROFILE_SPECS:
        missing.append(f"traffic.profile {profile!r}")
    if not missing:
        return ""
    return (f"{', '.join(missing)} not registered in this process: name the modules that "
            f"register them in {PLUGINS_ENV}, as the run had it (now: "
            f"{', '.join(plugin_names()) or 'unset'})")
