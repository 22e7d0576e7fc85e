"""``kernel-agent mcp --gateway``: the MCP server's kernel on a real Jupyter Kernel Gateway, through the SDK client.

The gateway runs on 127.0.0.1 with a token; the server reads it from a file. Data files go to the
remote kernel, what it writes comes back into the local workspace (where ``read_file`` looks), the
notebook records it all without the token, and closing the connection deletes the remote kernel.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from gateway import KernelGateway
from test_mcp import open_stdio, run, stdio_params, text_of

pytestmark = pytest.mark.kernel


def test_mcp_runs_its_kernel_on_the_gateway(tmp_path: Path, kernel_gateway: KernelGateway) -> None:
    data = tmp_path / "sales.csv"
    data.write_text("region,units\nnorth,3\nsouth,5\n")
    workspace = tmp_path / "ws"
    gateway = kernel_gateway
    token_file = tmp_path / "token"
    token_file.write_text(gateway.token + "\n")
    params = stdio_params(
        workspace, "--data", str(data), "--gateway", gateway.url, "--gateway-token-file", str(token_file)
    )
    with open_stdio(params, tmp_path / "server.log") as client:
        where = run(client, "import os\nprint('KERNEL_GATEWAY' in os.environ)")
        assert text_of(where).strip().endswith("True")  # the kernel is the gateway's, not ours
        assert len(gateway.kernels()) == 1
        total = run(client, "int(pd.read_csv(data.sales)['units'].sum())")
        assert "8" in text_of(total)  # the data file reached the remote kernel and was preloaded
        run(client, "open('made.txt', 'w').write('remote')")
        assert "remote" in text_of(client.call("read_file", {"path": "made.txt"}))
        assert (workspace / "made.txt").read_text() == "remote"
    assert _remote_kernels_gone(gateway) == []
    notebook = workspace.with_name(f"{workspace.name}.ipynb").read_text()
    assert "made.txt" in notebook and gateway.token not in notebook
    assert gateway.token not in (tmp_path / "server.log").read_text()


def _remote_kernels_gone(gateway: KernelGateway, seconds: float = 15) -> list[str]:
    """Poll the gateway until the server's kernel is deleted (closing is asynchronous); return those left."""
    end = time.monotonic() + seconds
    while (left := gateway.kernels()) and time.monotonic() < end:
        time.sleep(0.2)
    return left
