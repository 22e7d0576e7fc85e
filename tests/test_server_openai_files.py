"""The service's /v1/files through the real ``openai`` SDK (``client.files.*``), as a DeepAnalyze
client uses it: upload, list, retrieve, download, delete, and the errors the SDK raises."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai_server import OpenAIServer
from service_server import ServiceServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceServer]:
    with (
        OpenAIServer() as model,
        ServiceServer(
            tmp_path_factory.mktemp("files"), model.base_url, keys={"sdk-key", "other-key"}, max_upload_mb=1024 / 2**20
        ) as running,
    ):
        yield running


@pytest.fixture(scope="module")
def client(server: ServiceServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="sdk-key", max_retries=0) as sdk:
        yield sdk


def test_upload_list_retrieve_download_delete(client: openai.OpenAI, tmp_path: Path) -> None:
    source = tmp_path / "scores.csv"
    source.write_bytes(b"name,score\nada,9\n")
    with source.open("rb") as handle:
        created = client.files.create(file=handle, purpose="assistants")
    assert created.filename == "scores.csv" and created.bytes == 17 and created.purpose == "assistants"
    assert created.id in [f.id for f in client.files.list()]
    assert client.files.retrieve(created.id).filename == "scores.csv"
    assert client.files.content(created.id).content == b"name,score\nada,9\n"
    deleted = client.files.delete(created.id)
    assert deleted.deleted is True and deleted.id == created.id
    assert created.id not in [f.id for f in client.files.list()]
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(created.id)


def test_the_sdk_sees_clear_errors(client: openai.OpenAI, server: ServiceServer) -> None:
    with pytest.raises(openai.APIStatusError) as too_big:
        client.files.create(file=("big.csv", b"x" * 2000), purpose="assistants")
    assert str(too_big.value) == "Error code: 413 - the file is larger than the 1024-byte upload limit"
    mine = client.files.create(file=("mine.csv", b"a\n1\n"), purpose="assistants")
    with openai.OpenAI(base_url=server.url + "/v1", api_key="other-key", max_retries=0) as other:
        with pytest.raises(openai.NotFoundError) as hidden:
            other.files.content(mine.id)
        assert str(hidden.value) == f"Error code: 404 - no file {mine.id}"
        assert mine.id not in [f.id for f in other.files.list()]
    with (
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong-key", max_retries=0) as stranger,
        pytest.raises(openai.AuthenticationError),
    ):
        stranger.files.list()
    assert client.files.retrieve(mine.id).bytes == 4
