"""Secret redaction, one rule everywhere: values under keys that look like credentials
(`*key*`, `*token*`, `*secret*`, `*password*`, `*auth*`), URL user-info, bearer tokens and
`--api-key VALUE` style arguments become `***` in every file and page the suite writes."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
# "token" but not "tokens"/"tokenizer" (max_tokens, max-num-batched-tokens are settings)
SECRET_NAME = re.compile(r"(?i)(key|token(?!s|izer)|secret|passw(or)?d|auth|credential)")
_NAMES_A_VARIABLE = re.compile(r"(?i)_env$")  # api_key_env holds a variable's name
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s\"',;]+")
_PLAIN_LITERAL = re.compile(
    r"^(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|true|false|null|none)?$", re.IGNORECASE)


def _redact_value(value: str) -> str:
    """A command-line value under a secret-looking name: numbers and booleans are settings
    (`--max-num-batched-tokens 2048`), anything else is hidden."""
    return value if _PLAIN_LITERAL.match(value.strip()) else REDACTED


def redact_text(text: str) -> str:
    """Credentials inside free text: `scheme://user:pass@` and `Bearer <token>`."""
    return _BEARER.sub(rf"\1 {REDACTED}", _URL_USERINFO.sub(rf"\1{REDACTED}@", text))


def _redact_argv(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    hide_next = False
    for item in items:
        if not isinstance(item, str):
            out.append(redact_secrets(item))
            hide_next = False
            continue
        if hide_next:
            out.append(_redact_value(item))
            hide_next = False
            continue
        name, sep, value = item.partition("=")
        if sep and SECRET_NAME.search(name):  # NAME=value, --api-key=value, a.b.TOKEN=value
            out.append(f"{name}={_redact_value(value)}")
        else:
            out.append(redact_text(item))
            hide_next = item.startswith("-") and not sep and bool(SECRET_NAME.search(item))
    return out


def redact_secrets(value: Any) -> Any:
    """A copy of a JSON-like value with credentials removed, for every output file.

    - a mapping entry whose key matches `SECRET_NAME` (key, token — not tokens/tokenizer —,
      secret, password, passwd, auth, credential; any case) has its non-empty string value(s)
      replaced by `***`; numbers and booleans under such keys are settings and kept, nested
      mappings are searched; keys ending in `_env` (`api_key_env`) name a variable and are kept;
    - in lists of strings (argv, command lines) the value of `--flag value` and `NAME=value`
      whose name matches is replaced unless it is a plain number or boolean;
    - in every string, `scheme://user:pass@` and `Bearer <token>` lose their credential.
    """
    if isinstance(value, dict):
        redacted: dict[Any, Any] = {}
        for key, item in value.items():
            secret = (isinstance(key, str) and bool(SECRET_NAME.search(key))
                      and not _NAMES_A_VARIABLE.search(key))
            if secret and isinstance(item, str):
                redacted[key] = REDACTED if item else item
            elif secret and isinstance(item, list):
                redacted[key] = [(REDACTED if x else x) if isinstance(x, str)
                                 else redact_secrets(x) for x in item]
            else:
                redacted[key] = redact_secrets(item)
        return redacted
    if isinstance(value, list | tuple):
        return _redact_argv(list(value))
    if isinstance(value, str):
        return redact_text(value)
    return value
