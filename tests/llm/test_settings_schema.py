"""Settings resolution and the answer schema (decoded and validated at the edge)."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest

from crane.finding import ROOT_CAUSES
from crane.llm.schema import ANSWER_JSON_SCHEMA, AnswerError, LLMAnswer, Usage, decode_answer
from crane.llm.settings import LLMSettings, SettingsError, resolve_settings


def test_no_model_means_offline_without_error():
    s = resolve_settings(env={})
    assert not s.enabled and s.model is None


def test_precedence_explicit_over_lsp_over_env(tmp_path):
    env = {"CRANE_MODEL": "env/m", "CRANE_API_BASE": "http://env:1", "CRANE_LLM_TIMEOUT": "9",
           "CRANE_CACHE_DIR": str(tmp_path)}
    assert resolve_settings(env=env).model == "env/m"
    s = resolve_settings(lsp={"crane": {"llm": {"model": "lsp/m", "apiBase": "http://lsp:2"}}}, env=env)
    assert (s.model, s.api_base, s.timeout_s) == ("lsp/m", "http://lsp:2", 9.0)
    s = resolve_settings({"model": "cli/m"}, lsp={"crane.llm.model": "lsp/m"}, env=env)
    assert s.model == "cli/m" and s.api_base == "http://env:1"
    assert s.resolved_cache_dir() == tmp_path
    # an empty LSP value does not erase the environment's
    assert resolve_settings(lsp={"llm": {"model": ""}}, env=env).model == "env/m"


def test_bad_settings_are_clear_errors():
    with pytest.raises(SettingsError, match="CRANE_LLM_TIMEOUT must be a number"):
        resolve_settings(env={"CRANE_LLM_TIMEOUT": "soon"})
    with pytest.raises(SettingsError, match="api base must be an http"):
        resolve_settings({"api_base": "127.0.0.1:8000"}, env={})
    with pytest.raises(SettingsError, match="timeout must be positive"):
        resolve_settings({"timeout_s": 0}, env={})
    assert resolve_settings(env={"CRANE_LLM_CACHE": "off"}).cache is False


def test_schema_matches_the_struct():
    fields = set(LLMAnswer.__struct_fields__)
    assert set(ANSWER_JSON_SCHEMA["properties"]) == fields == set(ANSWER_JSON_SCHEMA["required"])
    assert ANSWER_JSON_SCHEMA["properties"]["root_cause"]["enum"] == [*ROOT_CAUSES, None]


@pytest.mark.parametrize("text", [
    '{"explanation": "x", "crash": false, "confidence": 0.3}',
    '```json\n{"explanation": "x", "crash": false, "confidence": 0.3}\n```',
    'Here you go: {"explanation": "x", "crash": false, "confidence": 0.3} hope it helps',
])
def test_decode_accepts_wrapped_objects(text):
    a = decode_answer(text)
    assert a.crash is False and a.exception is None and a.line is None


@pytest.mark.parametrize("text, error", [
    ("", "empty"),
    ("no json here", "no JSON object"),
    ('{"explanation": "x", "crash": true', "not valid JSON"),
    ('[1, 2]', "no JSON object"),
    ('{"crash": true, "confidence": 0.5}', "explanation"),
    ('{"explanation": "x", "crash": "yes", "confidence": 0.5}', "crash"),
    ('{"explanation": "x", "crash": true, "confidence": 1.5}', "confidence"),
    ('{"explanation": "x", "crash": true, "confidence": 0.5, "line": 0}', "line"),
    ('{"explanation": " ", "crash": true, "confidence": 0.5}', "explanation is empty"),
])
def test_decode_rejects_invalid_answers(text, error):
    with pytest.raises(AnswerError, match=error):
        decode_answer(text)


def test_root_cause_spellings_are_normalised():
    a = decode_answer('{"explanation": "x", "crash": true, "confidence": 0.5, "root_cause": "nb_specific"}')
    assert a.root_cause == "NB specific"


def test_usage_wire_shape_and_sum():
    u = Usage(prompt_tokens=10, completion_tokens=2, cost_usd=0.5, model="m") + Usage(prompt_tokens=1, cost_usd=None)
    assert u.prompt_tokens == 11 and u.cost_usd is None
    wire = msgspec.json.decode(msgspec.json.encode(Usage(prompt_tokens=3, cached_tokens=1, cost_usd=0.1, model="m")))
    assert wire == {"promptTokens": 3, "completionTokens": 0, "cachedTokens": 1, "costUsd": 0.1, "model": "m"}
    assert msgspec.json.decode(msgspec.json.encode(Usage(model="m")))["costUsd"] is None  # unpriced: null


def test_importing_the_llm_layer_does_not_import_litellm():
    code = ("import sys, crane.llm.predictor, crane.llm.prompt, crane.llm.client, crane.llm.settings; "
            "assert 'litellm' not in sys.modules, 'litellm imported eagerly'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_settings_struct_defaults():
    s = LLMSettings(model="openai/x")
    assert s.enabled and s.retries == 2 and s.cache and s.budget_usd is None


def test_structured_output_is_an_editor_setting():
    """crane.llm.structured (package.json) reaches the LLM settings; the environment fills in when it is unset."""
    from crane.lsp.settings import Settings

    settings = msgspec.convert({"llm": {"model": "openai/m", "structured": "object"}}, Settings)
    assert settings.llm_settings().structured == "object"
    assert resolve_settings(lsp={"crane": {"llm": {"structured": "none"}}}, env={}).structured == "none"
    assert resolve_settings(lsp={"llm": {"structured": None}}, env={"CRANE_LLM_STRUCTURED": "schema"}).structured == "schema"
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"llm": {"structured": "grammar"}}, Settings)
