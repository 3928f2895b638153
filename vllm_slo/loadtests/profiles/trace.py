"""`profile: trace`: a request trace replayed at its own times (`traffic.arrival.kind: trace`),
each record one single-turn request whose prompt carries the trace's prefix blocks
(`loadtests/trace_replay.py`: the schedule, the block texts, the implied hit rate;
`loadtests/trace_formats.py`: the readers). Its statistics — the trace's own, and those of
the requests planned inside the measured window with the hit rate they imply — go to the
run's provenance (`plan.trace`), where the report compares them with what was sent and what
vLLM counted (`vllm_slo/analysis/trace_fidelity.py`)."""

from __future__ import annotations

import functools
from pathlib import Path

from vllm_slo.loadtests.file_identity import file_identity
from vllm_slo.loadtests.plan_fitting import Candidate, Message, Tally
from vllm_slo.loadtests.profiles.base import Profile
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.loadtests.trace_formats import read_trace
from vllm_slo.loadtests.trace_replay import (
    BlockTexts,
    Replayed,
    Selection,
    check_blocks,
    implied_hits,
    statistics,
)
from vllm_slo.loadtests.trace_replay import select as select_sends
from vllm_slo.resources import user_folder
from vllm_slo.scenarios.profile_specs.trace import TraceSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec

DEFAULT_TRACE_PATH = user_folder("loadtests") / "data" / "trace_sample.jsonl"
PROFILE_NAME = "trace"


def trace_path(spec: TraceSpec) -> Path:
    return Path(spec.path).expanduser() if spec.path else DEFAULT_TRACE_PATH


def replay(traffic: TrafficSpec, max_sends: int) -> Selection:
    """What the run replays of its trace (`select_sends` over the file, read as far as the
    run needs). The last replay is kept, by the file's identity (`file_identity`) and the
    settings: the check before the server starts and the plan after it ask for the same one,
    and the second reads no file unless the file changed in between."""
    spec = traffic.settings(TraceSpec)
    path = trace_path(spec)
    return _read_replay(str(path), file_identity(path), spec.format, spec.start_s, spec.end_s,
                        spec.speedup, spec.rate_scale, spec.max_requests, traffic.total_s,
                        max_sends)


@functools.lru_cache(maxsize=1)
def _read_replay(path: str, identity: tuple[int, ...], fmt: str, start_s: float,
                 end_s: float | None, speedup: float, rate_scale: float,
                 max_requests: int | None, total_s: float, max_sends: int) -> Selection:
    del identity  # a part of the key only
    return select_sends(read_trace(path, fmt), start_s=start_s, end_s=end_s, speedup=speedup,
                        rate_scale=rate_scale, max_requests=max_requests, total_s=total_s,
                        max_sends=max_sends)


def check_trace(traffic: TrafficSpec, max_sends: int) -> None:
    """Read the part of the trace the run replays (its plan's `max_sends` requests at most),
    before any server starts: a bad line (the readers' TraceFormatError), block ids the input
    cannot fill, or a window with nothing to send raise ValueError saying where."""
    spec = traffic.settings(TraceSpec)
    path = trace_path(spec)
    selection = replay(traffic, max_sends)
    for send in selection.sends:
        check_blocks(send, spec.block_tokens, str(path))
    if not selection.sends:
        raise ValueError(_nothing_to_send(path, spec, traffic, selection.records_read))


def _nothing_to_send(path: Path, spec: TraceSpec, traffic: TrafficSpec, read: int) -> str:
    return (f"{path}: no request to send: {read} records read, none with input and output "
            f"tokens in the window from {spec.start_s:g} s"
            + (f" to {spec.end_s:g} s" if spec.end_s is not None else "")
            + f" within the run's {traffic.total_s:g} s at speedup {spec.speedup:g}")


def plan(traffic: TrafficSpec, seed: int, counter: TokenCounter, max_model_len: int | None,
         policy: str, n_requests: int, tally: Tally) -> list[Candidate]:
    """The replay's requests in send order, each with its send time (`arrival_s`)."""
    spec = traffic.settings(TraceSpec)
    path = trace_path(spec)
    selection = replay(traffic, n_requests)
    tally.filtered = dict(selection.filtered)
    if not selection.sends:
        raise ValueError(_nothing_to_send(path, spec, traffic, selection.records_read))
    words = WordTexts(counter)
    texts = BlockTexts(words.fillers, spec.block_tokens, seed)
    kept: list[tuple[Replayed, int]] = []  # a send and its prompt tokens after the policy
    for send in selection.sends:
        check_blocks(send, spec.block_tokens, str(path))
        tokens = send.record.input_tokens
        if max_model_len is not None and tokens + send.record.output_tokens > max_model_len:
            room = max_model_len - send.record.output_tokens
            if policy == "reject" or room < 1:
                tally.rejected += 1
                continue
            tally.trimmed += 1
            tokens = room  # the prompt's head: its leading blocks stay shared
        kept.append((send, tokens))
    if not kept:
        raise ValueError(f"{path}: every request of the replay is longer than the server's "
                         f"max-model-len {max_model_len} (traffic.overlong: {policy})")
    contents = [texts.text(send, position, tokens)
                for position, (send, tokens) in enumerate(kept)]
    counted = counter.count_many(contents)
    candidates = []
    for (send, _), content, tokens, (conversation, turn) in zip(
            kept, contents, counted, conversations([send for send, _ in kept]), strict=True):
        message = Message("user", content)
        message.tokens = tokens
        candidates.append(Candidate(conversation, turn, [message], send.record.output_tokens,
                                    PROFILE_NAME, arrival_s=send.offset_s))
    misses = [(tokens, want) for (_, want), tokens in zip(kept, counted, strict=True)
              if tokens != want]
    if misses:
        worst = max(abs(a - b) for a, b in misses)
        tally.warnings.append(
            f"trace: {len(misses)} of {len(kept)} prompts count differently by "
            f"{counter.name} from the lengths the trace gives (by up to {worst} tokens): the "
            "tokenizer does not split the prompt words one token each")
    tally.facts[PROFILE_NAME] = _facts(spec, path, traffic, selection, kept)
    _warn_short_replay(traffic, kept, selection.stopped, tally)
    return candidates


def conversations(sends: list[Replayed]) -> list[tuple[int, int]]:
    """(conversation id, turn) per send: the sends of one session (the generic format's
    `session_id`, per lane) are one conversation, its turns in send order (so a LoRA split
    deals a whole session to one name); a send without a session is a conversation of its
    own. Ids count up in order of first appearance."""
    ids: dict[tuple[int, str], int] = {}  # (lane, session) -> conversation
    turns: list[int] = []  # conversation -> turns so far
    out = []
    for send in sends:
        session = send.record.session_id
        key = None if session is None else (send.lane, session)
        conversation = len(turns) if key is None else ids.setdefault(key, len(turns))
        if conversation == len(turns):
            turns.append(0)
        out.append((conversation, turns[conversation]))
        turns[conversation] += 1
    return out


def _facts(spec: TraceSpec, path: Path, traffic: TrafficSpec, selection: Selection,
           kept: list[tuple[Replayed, int]]) -> dict[str, object]:
    """provenance's `plan.trace`: the settings, what reading found, the trace's own
    statistics (its window, in the trace's seconds) and the measured window's (in the run's
    seconds, with the hit rate the trace implies for it)."""
    records = selection.window_records
    first = records[0].timestamp_s if records else 0.0
    trace_hits = list(implied_hits(
        ((tuple((0, block) for block in r.hash_ids), r.input_tokens) for r in records),
        spec.block_tokens))
    all_hits = list(implied_hits(((send.blocks(), tokens) for send, tokens in kept),
                                 spec.block_tokens))
    start, end = traffic.warmup_s, traffic.warmup_s + traffic.duration_s
    inside = [i for i, (send, _) in enumerate(kept) if start <= send.offset_s < end]
    window = statistics(
        [kept[i][0].offset_s for i in inside], [kept[i][1] for i in inside],
        [kept[i][0].record.output_tokens for i in inside],
        [kept[i][0].blocks() for i in inside], [all_hits[i] for i in inside])
    return {
        "format": spec.format, "file": str(path), "speedup": spec.speedup,
        "rate_scale": spec.rate_scale, "block_tokens": spec.block_tokens,
        "window_s": [spec.start_s, spec.end_s], "records_read": selection.records_read,
        "stopped_at": selection.stopped, "hit_rate_tolerance": spec.hit_rate_tolerance,
        "trace": statistics([r.timestamp_s - first for r in records],
                            [r.input_tokens for r in records],
                            [r.output_tokens for r in records],
                            [r.hash_ids for r in records], trace_hits),
        "measured_window": window,
    }


def _warn_short_replay(traffic: TrafficSpec, kept: list[tuple[Replayed, int]], stopped: str,
                       tally: Tally) -> None:
    """The replay ends inside the measured window: its last seconds send nothing."""
    end = traffic.warmup_s + traffic.duration_s
    last = kept[-1][0].offset_s
    if stopped.startswith("the run's"):
        return
    if end - last > max(1.0, 0.05 * traffic.duration_s):
        tally.warnings.append(
            f"trace: the replay's last request is sent at {last:.1f} s (reading stopped at "
            f"{stopped}), the measured window lasts until {end:g} s: its last "
            f"{end - last:.1f} s send nothing (shorten traffic.duration or widen the window)")


PROFILE = Profile(PROFILE_NAME, plan, fastest_request_s=0.05)
