"""A fake Kubernetes API server for the discovery tests: a real HTTP server on 127.0.0.1 (a port the OS picks)
that answers `GET /api/v1/namespaces/{ns}/pods?labelSelector=…` with a PodList as the API server writes it, and
whose pods a test changes while a run watches them: a container restarts, a pod is deleted or replaced.

What it does not do: watches, writes through the API, field selectors, pagination; anything else is a 404
Status. It checks the bearer token of the kubeconfig it writes, so a test knows soak used that file.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "fake-k8s-token"
PODS_PATH = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/pods$")
# One requirement of a label selector: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
REQUIREMENT = re.compile(r"^(?:(!)?([A-Za-z0-9][-A-Za-z0-9_./]*)|([A-Za-z0-9][-A-Za-z0-9_./]*)\s*(==|=|!=)\s*"
                         r"([-A-Za-z0-9_.]*)|([A-Za-z0-9][-A-Za-z0-9_./]*)\s+(in|notin)\s*\(([^()]*)\))$")


class SelectorError(ValueError):
    """A label selector the API server would refuse (HTTP 400)."""


def split_requirements(selector: str) -> list[str]:
    """The requirements of a selector: commas outside parentheses separate them."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [part.strip() for part in parts + [current] if part.strip() or selector.strip()]


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Whether `labels` satisfy `selector` (an empty one selects everything); SelectorError for a bad one."""
    for text in split_requirements(selector) if selector.strip() else []:
        match = REQUIREMENT.match(text)
        if not match:
            raise SelectorError(f"unable to parse requirement: {text!r}")
        negated, exists, key, op, value, set_key, set_op, values = match.groups()
        if exists:
            if (exists in labels) == bool(negated):
                return False
        elif key:
            if (labels.get(key) == value) != (op in ("=", "==")):
                return False
        else:
            members = {v.strip() for v in values.split(",")}
            if (labels.get(set_key) in members) != (set_op == "in"):
                return False
    return True


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubernetes:
    """The pods of a fake cluster behind a real HTTP server; every change is seen by the next list."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.lists: list[str] = []  # the label selector of every pod list asked for, in order
        self.down = False  # answer every request with HTTP 500, as an API server that is failing
        self._lock = threading.Lock()
        self._versions = itertools.count(1000)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-k8s", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeKubernetes:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- the kubeconfig -----------------------------------------------------------------------------------
    def write_kubeconfig(self, path: Path, namespace: str | None = None) -> Path:
        """A kubeconfig whose current context is this server (with `namespace` when given)."""
        context = {"cluster": "fake", "user": "soak"} | ({"namespace": namespace} if namespace else {})
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                  "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                  "users": [{"name": "soak", "user": {"token": TOKEN}}],
                  "contexts": [{"name": "fake", "context": context}]}
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")  # JSON is YAML
        return path

    # -- the pods -----------------------------------------------------------------------------------------
    def add_pod(self, name: str, ip: str = "10.0.0.1", ports: list[tuple[str | None, int]] | None = None,
                labels: dict[str, str] | None = None, namespace: str = "default", ready: bool = True,
                containers: tuple[str, ...] = ("vllm",)) -> dict[str, Any]:
        """A pod as the API lists it: its containers' ports (on the first container), Ready or not."""
        ports = [("http", 8000)] if ports is None else ports
        container_ports = [{"containerPort": port, "protocol": "TCP"} | ({"name": port_name} if port_name else {})
                           for port_name, port in ports]
        specs = [{"name": c, "image": "vllm/vllm-openai:latest", "ports": container_ports if n == 0 else []}
                 for n, c in enumerate(containers)]
        statuses = [{"name": c, "image": "vllm/vllm-openai:latest", "imageID": "docker.io/vllm/vllm-openai@sha256:0",
                     "containerID": f"containerd://{uuid.uuid4().hex}", "ready": ready, "started": ready,
                     "restartCount": 0, "state": {"running": {"startedAt": _now()}}, "lastState": {}}
                    for c in containers]
        pod = {"metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                            "labels": {"app": "vllm"} if labels is None else labels,
                            "creationTimestamp": _now(), "resourceVersion": str(next(self._versions))},
               "spec": {"containers": specs, "restartPolicy": "Always"},
               "status": {"phase": "Running" if ready else "Pending", "podIP": ip, "podIPs": [{"ip": ip}],
                          "startTime": _now(), "containerStatuses": statuses,
                          "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                          "lastTransitionTime": _now()}]}}
        with self._lock:
            self.pods[(namespace, name)] = pod
        return pod

    def restart_container(self, name: str, container: str | None = None, namespace: str = "default",
                          exit_code: int = 137, reason: str = "OOMKilled") -> int:
        """The kubelet restarted a container of the pod (the first by default): its new restart count."""
        with self._lock:
            pod = self.pods[(namespace, name)]
            status = next(s for s in pod["status"]["containerStatuses"] if container in (None, s["name"]))
            status["restartCount"] += 1
            status["lastState"] = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": _now(),
                                                  "finishedAt": _now()}}
            pod["metadata"]["resourceVersion"] = str(next(self._versions))
            return status["restartCount"]

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        with self._lock:
            del self.pods[(namespace, name)]

    # -- serving ------------------------------------------------------------------------------------------
    def _answer(self, path: str, query: str, authorization: str | None) -> tuple[int, dict[str, Any]]:
        if self.down:
            return 500, status_body(500, "InternalError", "etcdserver: request timed out")
        if authorization != f"Bearer {TOKEN}":
            return 401, status_body(401, "Unauthorized", "Unauthorized")
        match = PODS_PATH.match(path)
        if not match:
            return 404, status_body(404, "NotFound", "the server could not find the requested resource")
        namespace = match.group(1)
        selector = (parse_qs(query).get("labelSelector") or [""])[0]
        self.lists.append(selector)
        with self._lock:
            try:
                items = [pod for (ns, _), pod in sorted(self.pods.items())
                         if ns == namespace and selector_matches(selector, pod["metadata"]["labels"])]
            except SelectorError as exc:
                return 400, status_body(400, "BadRequest", str(exc))
            body = {"kind": "PodList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(next(self._versions))}, "items": json.loads(json.dumps(items))}
        return 200, body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                parts = urlsplit(self.path)
                code, body = fake._answer(parts.path, parts.query, self.headers.get("Authorization"))
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args: Any) -> None:
                pass

        return Handler


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """The `Status` object the API server answers an error with."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
