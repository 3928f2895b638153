"""Secret redaction, one rule everywhere: values under keys that look like credentials
(`*key*`, `*token*`, `*secret*`, `*password*`, `*auth*`), URL user-info, bearer tokens and
`--api-key VALUE` style arguments become `***` in every file and page the suite writes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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


# `server.args={api-key: X}`, `server.env={HF_TOKEN: X}`: a YAML flow mapping in an override
_FLOW_ENTRY = re.compile(
    r"(?i)([\w.-]*(?:key|token(?!s|izer)|secret|passw(?:or)?d|auth|credential)[\w.-]*)"
    r"(\s*:\s*)([^\s,{}\[\]]+)")


def _redact_flow_entry(match: re.Match[str]) -> str:
    name, sep, value = match.groups()
    if _NAMES_A_VARIABLE.search(name):
        return match.group(0)
    return f"{name}{sep}{_redact_value(value)}"


def redact_values(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of the known secret `values` replaced (a server's own
    log echoes its arguments and environment in formats no pattern foresees)."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def spec_secret_values(args: Mapping[str, Any], env: Mapping[str, str],
                       url: str | None, api_key: str | None) -> list[str]:
    """The secrets a scenario's server carries: values of secret-named args and env entries
    (not plain numbers or booleans), the URL's password, the API key's value."""
    found = [str(v) for k, v in [*args.items(), *env.items()]
             if SECRET_NAME.search(k) and not _NAMES_A_VARIABLE.search(k)
             and isinstance(v, str) and _redact_value(v) == REDACTED]
    userinfo = re.match(r"(?i)[a-z][a-z0-9+.-]*://([^/\s@]+)@", url or "")
    if userinfo:
        found += [part for part in userinfo.group(1).split(":", 1)[1:] if part]
    return [*found, *([api_key] if api_key else [])]


# where redact_secrets leaves its marker in a string: the whole value, a URL's user-info,
# a bearer token, `NAME=***` / `{api-key: ***}` (a plain `***` inside free text is no marker)
_MARKER = re.escape(REDACTED)
_MARKED = re.compile(rf"^{_MARKER}$|://{_MARKER}@|(?i:bearer)\s+{_MARKER}"
                     rf"|[=:]\s*{_MARKER}(?=$|[\s,}}\]])")


def redacted_keys(document: Any, prefix: str = "") -> list[str]:
    """The dotted keys of a written (redacted) document whose value holds a credential
    `redact_secrets` replaced: what a copy read back lacks (a resumed experiment cannot run
    with it). A list (an argv) is named whole: an override gives it whole."""
    if isinstance(document, dict):
        found: list[str] = []
        for key, value in document.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, list | tuple):
                if any(redacted_keys(item, dotted) for item in value):
                    found.append(dotted)
            else:
                found += redacted_keys(value, dotted)
        return found
    if isinstance(document, list | tuple):
        return [prefix] if any(redacted_keys(item, prefix) for item in document) else []
    if isinstance(document, str) and _MARKED.search(document):
        return [prefix]
    return []


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
        elif sep and value.lstrip().startswith("{"):  # server.args={api-key: X}
            out.append(f"{name}={_FLOW_ENTRY.sub(_redact_flow_entry, redact_text(value))}")
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
