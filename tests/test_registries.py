"""The five plug-in registries (``plugins.Registry``): ours are registered through our own entry points, an
unknown name is a ``ConfigError`` listing the choices, and every group is read in one scan, once."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from kernel_agent import plugins
from kernel_agent.agent.config import AgentConfig
from kernel_agent.agent.languages import LANGUAGE_REGISTRY, LANGUAGES, PYTHON, R, get_language, language_of
from kernel_agent.agent.names import PROTOCOL_REGISTRY, PROTOCOLS
from kernel_agent.agent.protocols import get_protocol
from kernel_agent.errors import ConfigError
from kernel_agent.kernel.providers.attached import AttachedProvider
from kernel_agent.kernel.providers.local import LocalProvider
from kernel_agent.kernel.providers.registry import PROVIDER_REGISTRY, PROVIDERS, ProviderSettings, make_provider
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.model.registry import MODEL_REGISTRY, ModelSettings, split_model
from kernel_agent.sources import SOURCES

REGISTRIES = {
    "kernel_agent.protocols": (PROTOCOL_REGISTRY, PROTOCOLS),
    "kernel_agent.models": (MODEL_REGISTRY, ("openai",)),
    "kernel_agent.providers": (PROVIDER_REGISTRY, PROVIDERS),
    "kernel_agent.languages": (LANGUAGE_REGISTRY, LANGUAGES),
    "kernel_agent.sources": (SOURCES, ("postgresql",)),
}


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_ours_are_registered_through_our_own_entry_points(group: str) -> None:
    registry, ours = REGISTRIES[group]
    assert registry.group == group and registry.names()[: len(ours)] == ours
    assert {name: entry.dist and entry.dist.name for name, entry in registry.entry_points().items()} == {
        name: "kernel-agent" for name in ours
    }
    for name in ours:
        assert registry.entry(name.upper()).load() is not None  # any case; each one imports


@pytest.mark.parametrize(
    ("look_up", "message"),
    [
        (lambda: get_protocol("nope"), "unknown protocol 'nope'; choose one of: tools, tags, deepanalyze"),
        (lambda: MODEL_REGISTRY.make("nope"), "unknown model plug-in 'nope'; choose one of: openai"),
        (lambda: make_provider("nope", ProviderSettings()), "unknown kernel provider 'nope'; choose one of: local, "),
        (lambda: AsyncKernelSession(provider="nope"), "unknown kernel provider 'nope'; choose one of: local, "),
        (lambda: get_language("nope"), "unknown language 'nope'; choose one of: python, r"),
        (lambda: AgentConfig.resolve(model="m", protocol="nope"), "unknown protocol 'nope'; choose one of tools, "),
    ],
)
def test_an_unknown_name_is_a_config_error_listing_the_choices(look_up: Callable[[], Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        look_up()


def test_the_session_makes_its_provider_by_name(tmp_path: Any) -> None:
    assert isinstance(AsyncKernelSession(tmp_path).provider, LocalProvider)
    assert isinstance(make_provider("attached", ProviderSettings(connection_file="k.json")), AttachedProvider)
    with pytest.raises(ConfigError, match="needs a running kernel's connection file"):
        make_provider("attached", ProviderSettings())
    with pytest.raises(ConfigError, match="needs a gateway URL"):
        AsyncKernelSession(tmp_path, provider="gateway")
    with pytest.raises(ConfigError, match="must look like http://host:port"):
        AsyncKernelSession(tmp_path, gateway="ftp://nowhere")
    assert "sekrit" not in repr(ProviderSettings(gateway="http://gw:8888", gateway_token="sekrit"))


def test_a_model_name_is_the_endpoints_unless_its_prefix_is_a_plug_in() -> None:
    assert split_model("openai:gpt-4o") == ("openai", "gpt-4o")
    assert split_model("OpenAI:gpt-4o") == ("openai", "gpt-4o")
    for plain in ("gpt-4o", "qwen2.5:7b", "ollama/llama3:8b", "hf.co/org/model:Q4_K_M", "openai:", ":x"):
        assert split_model(plain) == ("openai", plain)
    assert "sk-secret" not in repr(ModelSettings(api_key="sk-secret"))


def test_a_kernels_language_is_the_registered_one_or_a_generic_one() -> None:
    assert language_of(None) is PYTHON and language_of({"name": "R"}) is R
    assert language_of({"name": "Julia"}).key == "julia"  # none registered: generic, never an error


def test_every_group_is_read_in_one_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = importlib.metadata.entry_points

    def counted() -> Any:
        calls.append(1)
        return real()

    monkeypatch.setattr(importlib.metadata, "entry_points", counted)
    plugins.forget()
    try:
        plugins.warm()
        names = [registry.names() for registry, _ in REGISTRIES.values()]
        assert all(names) and "tags" in PROTOCOL_REGISTRY.choices and "nope" not in PROTOCOL_REGISTRY.choices
        assert list(PROVIDER_REGISTRY.choices)[:3] == list(PROVIDERS)
        assert len(calls) == 1
    finally:
        plugins.forget()


def test_the_service_takes_any_registered_protocol_and_no_other() -> None:
    from kernel_agent.server.app import RunRequest

    assert RunRequest(task="t", protocol="tags").protocol == "tags"
    with pytest.raises(ValidationError, match="unknown protocol 'nope'; choose one of: tools, tags, deepanalyze"):
        RunRequest(task="t", protocol="nope")


def test_front_ends_read_no_registry_when_imported() -> None:
    probe = (
        "import kernel_agent.cli.app, kernel_agent.magic.cell, kernel_agent.kernel.session\n"
        "from kernel_agent import plugins\nprint(plugins._scan.cache_info().currsize)"
    )
    scanned = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert scanned.strip() == "0"  # choices are read when used: importing scans no site-packages


def test_the_gateway_provider_without_its_extra_names_it() -> None:
    probe = (
        "import sys\nsys.modules['websockets'] = None  # not installed: the core alone\n"
        "from kernel_agent.errors import ExtraMissingError\n"
        "from kernel_agent.kernel.session import AsyncKernelSession\n"
        "try:\n    AsyncKernelSession(gateway='http://gw:8888')\nexcept ExtraMissingError as exc:\n    print(exc)"
    )
    said = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "pip install 'kernel-agent[gateway]'" in said
