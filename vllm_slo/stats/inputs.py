"""Argument checks shared by the statistics modules: invalid arguments (a confidence of 1, a
2-D array) are errors; missing data (NaN, empty) is not, it is dropped with a warning."""

from __future__ import annotations

import math

import numpy as np


def check_confidence(confidence: float) -> None:
    if not (0.0 < confidence < 1.0) or math.isnan(confidence):
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")


def check_alpha(alpha: float) -> None:
    if not (0.0 < alpha < 1.0) or math.isnan(alpha):
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")


def as_1d_float(values: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    return arr


def drop_nan(values: np.ndarray, name: str) -> tuple[np.ndarray, tuple[str, ...]]:
    arr = as_1d_float(values, name)
    nan = np.isnan(arr)
    n_nan = int(nan.sum())
    if n_nan == 0:
        return arr, ()
    return arr[~nan], (f"dropped {n_nan} NaN value{'s' if n_nan != 1 else ''} from {name}",)


def drop_nonfinite(values: np.ndarray, name: str) -> tuple[np.ndarray, tuple[str, ...]]:
    arr = as_1d_float(values, name)
    bad = ~np.isfinite(arr)
    n_bad = int(bad.sum())
    if n_bad == 0:
        return arr, ()
    return arr[~bad], (
        f"dropped {n_bad} non-finite value{'s' if n_bad != 1 else ''} from {name}",
    )
