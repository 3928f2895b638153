"""Token counters: the local tokenizer.json counter (the tiny model's real tokenizer) and the
server /tokenize counter (against an in-process HTTP server answering like vLLM)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import vllm_slo.loadtests.tokens as tokens_module
from vllm_slo.loadtests.tokens import TokenCounter, local_token_counter, server_token_counter
from vllm_slo.servers.tiny_model import tiny_model_dir

TEXTS = ["hello world", "", "The latency of the server, p99 = 0.25 s.", "日本語 text 🙂",
         "<|user|> special-looking text", " leading space", "x" * 5000]


def test_local_counter_counts_like_the_tokenizer_without_special_tokens(
        tiny_tokenizer_file, tiny_counter) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_tokenizer_file))
    expected = [len(tokenizer.encode(t, add_special_tokens=False).ids) for t in TEXTS]
    assert tiny_counter.count_many(TEXTS) == expected
    assert tiny_counter.count_many([]) == []
    assert expected[1] == 0
    assert isinstance(tiny_counter, TokenCounter)
    assert str(tiny_tokenizer_file.resolve()) in tiny_counter.name


def test_local_counter_accepts_a_folder_and_ignores_truncation_and_padding(
        tiny_tokenizer_file, tmp_path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_tokenizer_file))
    tokenizer.enable_truncation(max_length=4)
    tokenizer.enable_padding(length=64)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    counter = local_token_counter(tmp_path)
    plain = local_token_counter(tiny_tokenizer_file)
    assert counter.count_many(TEXTS) == plain.count_many(TEXTS)
    assert max(counter.count_many(TEXTS)) > 64


def test_local_counter_batches_large_inputs(tiny_counter, monkeypatch) -> None:
    texts = [f"request {i} " * (i % 13) for i in range(200)]
    whole = tiny_counter.count_many(texts)
    monkeypatch.setattr(tokens_module, "_BATCH_CHARS", 50)
    assert tiny_counter.count_many(texts) == whole


def test_local_counter_errors_name_the_path(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"no tokenizer\.json at .*nowhere"):
        local_token_counter(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"no tokenizer\.json at"):
        local_token_counter(tmp_path)  # a folder without tokenizer.json
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"tokenizer\.json: not a readable tokenizer"):
        local_token_counter(bad)


def test_trained_tokenizer_is_the_one_the_model_is_built_with(tiny_counter) -> None:
    built = tiny_model_dir() / "tokenizer.json"
    if not built.is_file():
        pytest.skip("the tiny model is not built on this machine")
    assert local_token_counter(built).count_many(TEXTS) == tiny_counter.count_many(TEXTS)


class _TokenizeServer:
    """Answers POST /tokenize like vLLM, counting with the local tokenizer."""

    def __init__(self, counter: TokenCounter, status: int = 200) -> None:
        self.bodies: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.bodies.append({"path": self.path, **body})
                if status == 200:
                    (count,) = counter.count_many([body["prompt"]])
                    answer = json.dumps({"count": count, "max_model_len": 2048,
                                         "tokens": list(range(count))}).encode()
                else:
                    answer = b'{"error": "model not found"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _TokenizeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_server_counter_asks_tokenize_without_special_tokens(tiny_counter) -> None:
    with _TokenizeServer(tiny_counter) as server:
        counter = server_token_counter(server.url + "/v1/", "tiny")
        assert counter.count_many(TEXTS) == tiny_counter.count_many(TEXTS)
        assert "/tokenize" in counter.name
    assert len(server.bodies) == len(TEXTS)
    assert server.bodies[0] == {"path": "/tokenize", "model": "tiny", "prompt": TEXTS[0],
                                "add_special_tokens": False}


def test_server_counter_error_is_clear(tiny_counter) -> None:
    with _TokenizeServer(tiny_counter, status=404) as server:
        counter = server_token_counter(server.url, "tiny")
        with pytest.raises(ValueError, match=r"/tokenize answered HTTP 404.*traffic\.tokenizer"):
            counter.count_many(["hello"])
