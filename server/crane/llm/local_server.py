"""Which local OpenAI-compatible server answers at `api_base`, and whether it enforces a JSON schema.

litellm's capability table knows hosted models only: behind `openai/<alias>` + a local `api_base` it cannot
tell llama.cpp's `llama-server` (which turns `json_schema` into a grammar) from `llama-cpp-python` (which
answers `json_schema` with HTTP 500). One cheap GET per server and process tells them apart:

- llama.cpp `llama-server`: `GET /props` has `default_generation_settings`;
- Ollama: `GET /api/version` has `version` (and the Ollama providers of litellm);
- vLLM: `GET /version` has `version` (and litellm's `hosted_vllm/`);
- LM Studio: `GET /api/v0/models` has `data` (and litellm's `lm_studio/`);
- llama-cpp-python: `GET /openapi.json` is titled "llama.cpp Python API".

The first four enforce `response_format: json_schema`. llama-cpp-python enforces a schema in its own dialect,
`{"type": "json_object", "schema": {...}}` (a grammar; `json_schema` is an HTTP 500 there): `schema_format`
writes the schema request the server understands. Anything else gets `json_object` (and the client's fallback
on an error that names response_format). Set `structured` (CRANE_LLM_STRUCTURED, --llm-structured) to skip this.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

SCHEMA_PROVIDERS = ("ollama/", "ollama_chat/", "lm_studio/", "hosted_vllm/")
PROBES: tuple[tuple[str, str, str], ...] = (
    ("llama.cpp", "/props", "default_generation_settings"),
    ("ollama", "/api/version", "version"),
    ("lm-studio", "/api/v0/models", "data"),
    ("vllm", "/version", "version"),
    ("llama-cpp-python", "/openapi.json", "info"),  # FastAPI's schema: also its title must say so (_matches)
)
LLAMA_CPP_PYTHON_TITLE = "llama.cpp python"
PROBE_TIMEOUT_S = 2.0

_known: dict[str, str | None] = {}
_no_stream: set[str] = set()  # api_bases whose server answered `stream: true` with no event stream, or refused it
_no_constraint: set[str] = set()  # api_bases whose server rejected the agent's tool-call constraint
_lock = threading.Lock()


def _root(api_base: str) -> str:
    """`http://host:port/v1` -> `http://host:port` (the servers' own endpoints live at the root)."""
    parts = urlsplit(api_base)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _get_json(url: str) -> object | None:
    req = urllib.request.Request(url, headers={"accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=PROBE_TIMEOUT_S) as resp:  # noqa: S310 (http(s) checked)
            if resp.status != 200:
                return None
            return json.loads(resp.read(65536) or b"null")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _matches(name: str, body: object, key: str) -> bool:
    if not isinstance(body, dict) or key not in body:
        return False
    if name == "llama-cpp-python":  # any FastAPI app serves /openapi.json
        info = body.get("info")
        return isinstance(info, dict) and LLAMA_CPP_PYTHON_TITLE in str(info.get("title", "")).lower()
    return True


def detect_server(api_base: str) -> str | None:
    """"llama.cpp", "ollama", "lm-studio", "vllm", "llama-cpp-python", or None (unknown); asked once per
    api_base and process."""
    with _lock:
        if api_base in _known:
            return _known[api_base]
    found = None
    root = _root(api_base)
    for name, path, key in PROBES:
        body = _get_json(root + path)
        if _matches(name, body, key):
            found = name
            break
    log.info("local model server at %s: %s", api_base, found or "unknown (json_object)")
    with _lock:
        _known[api_base] = found
    return found


def enforces_json_schema(api_base: str | None, model: str) -> bool:
    if model.startswith(SCHEMA_PROVIDERS):
        return True
    if not api_base:
        return False
    return detect_server(api_base) is not None


def schema_format(api_base: str | None, default: dict, schema: dict) -> dict:
    """The response_format that asks the server at `api_base` to enforce `schema`: llama-cpp-python's
    `{"type": "json_object", "schema": ...}`; elsewhere `default` (the OpenAI `json_schema` form)."""
    if api_base and detect_server(api_base) == "llama-cpp-python":
        return {"type": "json_object", "schema": schema}
    return default


def answers(api_base: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """The server at `api_base` answers HTTP at all (any status, even 404): GET {api_base}/models. False when
    it accepts connections but sends nothing back within `timeout` (hung), or refuses them."""
    return _answers_http(api_base.rstrip("/") + "/models", timeout)


def streams(api_base: str) -> bool:
    """Whether requests to `api_base` are streamed (crane.llm.local_call): yes, unless its server showed it
    cannot (`mark_no_stream`)."""
    with _lock:
        return api_base not in _no_stream


def mark_no_stream(api_base: str) -> None:
    """The server at `api_base` cannot stream: its requests are sent whole from now on (this process)."""
    log.warning("the model server at %s does not stream: requests to it are sent without streaming", api_base)
    with _lock:
        _no_stream.add(api_base)


def takes_constraint(api_base: str | None) -> bool:
    """Whether the agent may hold the server at `api_base` to one tool call per reply (crane.agent.model_call):
    yes, unless it rejected that before (`mark_no_constraint`)."""
    with _lock:
        return (api_base or "") not in _no_constraint


def mark_no_constraint(api_base: str | None) -> None:
    """The server at `api_base` rejected `tool_choice: "required"` or a tool-call `response_format`: the agent's
    requests go without it from now on (this process)."""
    log.warning("the model server at %s rejected the tool-call constraint: agent requests go without it", api_base)
    with _lock:
        _no_constraint.add(api_base or "")


def alive(api_base: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """The server at `api_base` answers HTTP at all while it may be computing: GET {root}/health, any status
    (llama.cpp's llama-server and vLLM serve it; llama-cpp-python, Ollama and LM Studio answer 404). Not
    `/v1/models`: llama-cpp-python serves that under its model lock, so it waits for the reply being computed
    and, while it waits, makes the server cut a streamed reply short (its `interrupt_requests`). False when
    the server accepts connections but sends nothing back within `timeout` (hung), or refuses them."""
    return _answers_http(_root(api_base) + "/health", timeout)


def _answers_http(url: str, timeout: float) -> bool:
    """GET `url` gets any HTTP answer within `timeout` (a status is an answer)."""
    req = urllib.request.Request(url, headers={"accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout):  # noqa: S310 (http(s) checked by the settings)
            return True
    except urllib.error.HTTPError:
        return True  # an HTTP status is an answer
    except (urllib.error.URLError, OSError, ValueError):
        return False


def forget() -> None:
    """Drop what was detected (tests; a server replaced at the same address)."""
    with _lock:
        _known.clear()
        _no_stream.clear()
        _no_constraint.clear()
