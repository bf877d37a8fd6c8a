"""`sharpen serve --ray` (app/serve/ray_replicas.py): two replicas of the embedded model on a local
Ray cluster behind one address. Requests spread over both, same-prefix requests stay on one, each
answer is a single server's at the same seed, and a replica killed mid-run fails only its own
request (a clean error event) while the other answers and Ray starts a new one.

Needs Ray Serve (the `ray` extra, also in the test extra); skipped without it. The module took 24 s
here (2 shared cores): the local cluster starts in about 10 s."""
from __future__ import annotations

import json
import os
import signal
import socket
import time

import httpx
import pytest

from sharpen.app.serve.ray_replicas import AFFINITY_CHARS, REPLICA_HEADER, affinity_key

ray = pytest.importorskip("ray", reason="Ray Serve is the optional `ray` extra (pip install -e '.[ray]')")


def test_the_affinity_key_is_the_prompts_head_whatever_the_endpoint():
    head = "x" * AFFINITY_CHARS
    assert affinity_key(json.dumps({"input_prefix": head + "a"}).encode()) == affinity_key(json.dumps({"input_prefix": head + "b"}).encode())
    assert affinity_key(json.dumps({"input_prefix": "a" + head}).encode()) != affinity_key(json.dumps({"input_prefix": "b" + head}).encode())
    # llama.vim's extra chunks come first, as in the canvas; an OpenAI prompt and a chat are keyed too
    assert affinity_key(json.dumps({"input_extra": [{"filename": "a.py", "text": "import os\n"}], "input_prefix": "x"}).encode()) \
        != affinity_key(json.dumps({"input_prefix": "x"}).encode())
    assert affinity_key(json.dumps({"prompt": "def f("}).encode()) == affinity_key(json.dumps({"input_prefix": "def f("}).encode())
    assert affinity_key(json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()) is not None
    assert affinity_key(b"") is None and affinity_key(b"not json") is None and affinity_key(b"[1]") is None


@pytest.fixture(scope="module")
def replicas():
    from ray import serve

    from sharpen.app.serve.common import Limits
    from sharpen.app.serve.ray_replicas import APP_NAME, deployments
    from sharpen.core.settings import Editing, ModelRequest, Sampling

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=4, include_dashboard=False, logging_level="warning", log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(deployments(2, 0, 0.5, ModelRequest(), Limits(), Sampling(), Editing(), None, 64), name=APP_NAME, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def runner():
    from sharpen.core.models.load import load_model
    from sharpen.core.run import Runner
    from sharpen.core.settings import ModelRequest

    return Runner(load_model(ModelRequest()))


def _infill(url: str, prefix: str, seed: int = 3, tokens: int = 8) -> httpx.Response:
    return httpx.post(f"{url}/infill", json={"input_prefix": prefix, "input_suffix": "\n", "n_predict": tokens, "seed": seed}, timeout=120)


def _running_replicas() -> int:
    from ray import serve

    from sharpen.app.serve.ray_replicas import APP_NAME

    states = serve.status().applications[APP_NAME].deployments["Replica"].replica_states
    return states.get("RUNNING", 0)


def test_requests_spread_over_both_replicas_and_each_gets_a_single_servers_answer(replicas, runner):
    from serving import local_text

    served = {}
    for i in range(12):
        prefix = f"def step_{i}(state):\n    return "
        answer = _infill(replicas, prefix)
        assert answer.status_code == 200, answer.text
        served.setdefault(answer.headers[REPLICA_HEADER], []).append(i)
        assert answer.json()["content"] == local_text(runner, prefix + "\n", len(prefix), 8, seed=3)
    assert len(served) == 2, served  # 12 prompt heads on a 2-replica ring: both take some


def test_the_same_prefix_goes_to_the_same_replica(replicas):
    prefix = "class Ledger:\n    def __init__(self):\n        "
    assert len({_infill(replicas, prefix, seed=s).headers[REPLICA_HEADER] for s in range(4)}) == 1


def test_a_replica_killed_mid_run_fails_only_that_request_and_the_next_succeeds(replicas, runner):
    from serving import local_text

    prefix = "def long_answer(items):\n    "
    body = {"input_prefix": prefix, "input_suffix": "\n", "n_predict": 400, "seed": 1, "stream": True, "samples": 1}
    with httpx.stream("POST", f"{replicas}/infill", json=body, timeout=120) as stream:
        assert stream.status_code == 200
        pid = int(stream.headers[REPLICA_HEADER])
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[6:])["stop"] is False  # the run is under way on that replica
        os.kill(pid, signal.SIGKILL)
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest, "the stream ended without an error event"
    last = json.loads(rest[-1][6:])
    assert "error" in last and "stopped mid-answer" in last["error"]["message"]  # one clean error event, no traceback
    # Meanwhile the other replica answers, and the killed request's own prefix is answered again.
    for i in range(3):
        other = _infill(replicas, f"x_{i} = ")
        assert other.status_code == 200, other.text
    again = _infill(replicas, prefix)
    assert again.status_code == 200, again.text
    assert int(again.headers[REPLICA_HEADER]) != pid
    assert again.json()["content"] == local_text(runner, prefix + "\n", len(prefix), 8, seed=3)
    deadline = time.monotonic() + 120
    while _running_replicas() < 2:  # Ray replaces the dead replica
        assert time.monotonic() < deadline, "Ray did not replace the killed replica"
        time.sleep(1)
