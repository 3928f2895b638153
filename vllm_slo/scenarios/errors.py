"""The suite's exception hierarchy and its exit codes.

Request outcomes are rows, never exceptions; exceptions are for broken configuration or
infrastructure only.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Fixed, documented process exit codes (README.md, docs/scenarios.md)."""

    PASS = 0
    SLO_FAILED = 1
    USAGE_ERROR = 2
    INCONCLUSIVE = 3
    INVALID_MEASUREMENT = 4


class SloSuiteError(Exception):
    """Base of every error the suite raises on purpose."""

    exit_code: ExitCode = ExitCode.INVALID_MEASUREMENT


class ScenarioError(SloSuiteError):
    """A scenario file or override is wrong: names file, dotted key, bad value, what is allowed."""

    exit_code = ExitCode.USAGE_ERROR


class ServerError(SloSuiteError):
    """The server could not be started, never became ready, or died during the run."""

    exit_code = ExitCode.INVALID_MEASUREMENT


class ServerConfigError(ServerError):
    """vLLM itself rejected the engine arguments (argparse or config validation)."""

    exit_code = ExitCode.USAGE_ERROR
