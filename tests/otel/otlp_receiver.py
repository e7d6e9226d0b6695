"""A small OTLP/HTTP receiver on loopback for the tests: it takes what the SDK's OTLP/HTTP
exporters POST to /v1/traces and /v1/metrics, decodes it with opentelemetry-proto's protobuf
classes (the wire format itself), and keeps the spans and metric names."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Received:
    """The spans (service name, span) and metric names received so far."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # a wait_for condition may call named()
        self.spans: list[tuple[str, Any]] = []
        self.metrics: list[tuple[str, str]] = []
        self.posts: list[str] = []

    def wait_for(self, condition: Callable[[Received], bool], timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if condition(self):
                    return True
            time.sleep(0.05)
        return False

    def named(self, name: str) -> list[tuple[str, Any]]:
        with self.lock:
            return [(service, span) for service, span in self.spans if span.name == name]


def _service(resource: Any) -> str:
    for attribute in resource.attributes:
        if attribute.key == "service.name":
            return str(attribute.value.string_value)
    return ""


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """(the endpoint, e.g. http://127.0.0.1:PORT, and what arrives), while the server runs."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with received.lock:
                received.posts.append(self.path)
            if self.path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                with received.lock:
                    for resource_spans in request.resource_spans:
                        service = _service(resource_spans.resource)
                        for scope in resource_spans.scope_spans:
                            received.spans.extend((service, span) for span in scope.spans)
                reply = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                metrics_request = ExportMetricsServiceRequest.FromString(body)
                with received.lock:
                    for resource_metrics in metrics_request.resource_metrics:
                        service = _service(resource_metrics.resource)
                        for scope_metrics in resource_metrics.scope_metrics:
                            received.metrics.extend((service, m.name) for m in scope_metrics.metrics)
                reply = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
