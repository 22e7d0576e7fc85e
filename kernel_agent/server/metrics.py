"""What the service tells Prometheus: ``Metrics`` (a registry of its own per service) and its text.

Owns the metric names and how each is measured; nothing else. Gauges that describe state (runs by
status, live kernels, runs executing or about to, writes not yet committed) are read from the service when
scraped, so they can never drift; what happens over time (lease takeovers, the model's latency) is
counted as it happens. The service calls ``model_replied``; the HTTP layer serves ``exposition()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """The service's metrics. ``state`` is called at each scrape and returns the current values:
    ``runs`` (status → count), ``live_kernels``, ``running``, ``starting``, ``pending_writes``."""

    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_State(state))
        self.takeovers = Counter(
            "kernel_agent_lease_takeovers",
            "Runs taken over from a replica that stopped renewing its lease.",
            registry=self.registry,
        )
        self.model_latency = Histogram(
            "kernel_agent_model_latency_seconds",
            "From asking the model to its whole reply, per round.",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def model_replied(self, seconds: float) -> None:
        self.model_latency.observe(seconds)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric, now."""
        return generate_latest(self.registry)


class _State(Collector):
    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.state()
        runs = GaugeMetricFamily("kernel_agent_runs", "Runs by status.", labels=["status"])
        for status, count in sorted(now["runs"].items()):
            runs.add_metric([status], count)
        yield runs
        yield GaugeMetricFamily(
            "kernel_agent_live_kernels", "Thread kernels alive on this replica.", value=now["live_kernels"]
        )
        yield GaugeMetricFamily(
            "kernel_agent_running_runs",
            "Runs executing on this replica (the queue that --max-running caps).",
            value=now["running"],
        )
        yield GaugeMetricFamily(
            "kernel_agent_starting_runs",
            "Runs let in and not executing yet (making room for "
            "their kernel, taking their lease): this replica's queue; over --max-running, "
            "429.",
            value=now["starting"],
        )
        yield GaugeMetricFamily(
            "kernel_agent_pending_writes", "Record writes queued and not yet committed.", value=now["pending_writes"]
        )
