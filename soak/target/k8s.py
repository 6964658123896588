"""Kubernetes discovery (`--k8s-selector`): a fleet's replicas are the running, ready pods a label selector
matches, and each replica's run keeps watching its pod.

Through the official `kubernetes` client (the `k8s` extra), imported only when a selector is given. Its
configuration is the pod's service account inside a cluster, else the kubeconfig (`KUBECONFIG` or
~/.kube/config). The pods are read as the API's JSON, not the client's generated models, so what soak reads
of a pod is named here once (`PodView`).

The watch (`PodTarget`, one per replica's run, polled from the conductor's loop every `WATCH_EVERY_S`): a
container whose restart count grows is a crash of that replica's server; a pod deleted and replaced — the same
name with a new uid (a StatefulSet), or a new pod the selector matches that no replica has — is a restart, and
the run follows the new pod's address. Replicas claim new pods through files in the fleet's folder, so two
replicas that lost their pods at once never follow the same one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.address import join_host_port
from soak.config import ReplicaSpec, RunConfig
from soak.errors import ConfigError, TargetError
from soak.target.base import ExternalTarget, ServerChange, ServerInfo

log = logging.getLogger(__name__)

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"  # set in every pod: then the service account is the configuration
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
API_TIMEOUT_S = 10.0
WATCH_EVERY_S = 10.0
CLAIMS_FOLDER = "k8s-claims"  # in the fleet's folder: one file per pod a replica followed, naming the replica


def kubernetes_client() -> Any:
    """The `kubernetes` package, or a ConfigError naming the extra that brings it."""
    try:
        import kubernetes
    except ImportError:
        raise ConfigError("--k8s-selector needs the Kubernetes client: pip install 'soak[k8s]'") from None
    return kubernetes


@dataclass(frozen=True)
class PodView:
    """What soak reads of one pod."""

    name: str
    uid: str
    ip: str | None
    phase: str
    ready: bool  # Running, its Ready condition True, and not being deleted
    created: str
    ports: tuple[tuple[str | None, int], ...]  # (name, containerPort) of every container, in order
    restarts: dict[str, int] = field(default_factory=dict)  # container name → restart count
    last_exit: dict[str, dict[str, Any]] = field(default_factory=dict)  # container → its last termination

    @classmethod
    def from_json(cls, pod: dict[str, Any]) -> PodView:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        ready = (status.get("phase") == "Running" and not meta.get("deletionTimestamp")
                 and any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []))
        ports = tuple((port.get("name"), int(port["containerPort"])) for container in spec.get("containers") or []
                      for port in container.get("ports") or [] if port.get("containerPort"))
        statuses = status.get("containerStatuses") or []
        return cls(name=meta.get("name", ""), uid=meta.get("uid", ""), ip=status.get("podIP") or None,
                   phase=status.get("phase") or "Unknown", ready=ready, created=meta.get("creationTimestamp") or "",
                   ports=ports, restarts={s["name"]: int(s.get("restartCount") or 0) for s in statuses},
                   last_exit={s["name"]: (s.get("lastState") or {}).get("terminated") or {} for s in statuses})

    def state(self) -> str:
        """Its phase, or `not ready` while Running: what an error says of a pod soak cannot use."""
        return "not ready" if self.phase == "Running" else self.phase


def pod_port(pod: PodView, wanted: str | None) -> int:
    """The container port of the OpenAI server: `wanted` by number or name, else the one named http, else the
    first declared; TargetError naming the pod when there is none."""
    if wanted is not None and wanted.isdigit():
        return int(wanted)
    if wanted is not None:
        port = next((number for name, number in pod.ports if name == wanted), None)
        if port is None:
            raise TargetError(f"pod {pod.name} has no container port named {wanted!r} (--k8s-port)")
        return port
    named = next((number for name, number in pod.ports if name == "http"), None)
    if named is None and not pod.ports:
        raise TargetError(f"pod {pod.name} declares no container port: name the server's with --k8s-port")
    return named if named is not None else pod.ports[0][1]


def pod_url(pod: PodView, wanted: str | None) -> str:
    return f"http://{join_host_port(pod.ip or '', pod_port(pod, wanted))}"


class PodLister:
    """Lists the pods of one namespace by label selector through the official client."""

    def __init__(self, namespace: str | None = None):
        kubernetes = kubernetes_client()
        self._exceptions = kubernetes.client.exceptions
        configuration = kubernetes.client.Configuration()
        in_cluster = bool(os.environ.get(IN_CLUSTER_ENV))
        try:
            if in_cluster:
                kubernetes.config.load_incluster_config(client_configuration=configuration)
            else:
                # KUBECONFIG read now: the client reads it once, when imported
                kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                                   client_configuration=configuration, persist_config=False)
        except (kubernetes.config.ConfigException, OSError) as exc:
            where = "the pod's service account" if in_cluster else "the kubeconfig (KUBECONFIG or ~/.kube/config)"
            raise ConfigError(f"--k8s-selector: no usable Kubernetes configuration in {where}: "
                              f"{first_line(exc)}") from None
        configuration.retries = 1  # one quick reconnect; an API down is said at once, not after urllib3's three
        self.host = configuration.host
        self.namespace = namespace or default_namespace(kubernetes, in_cluster)
        self._api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))

    def list(self, selector: str) -> list[PodView]:
        """The pods `selector` matches; ConfigError for a selector the API refuses, TargetError otherwise."""
        try:
            response = self._api.list_namespaced_pod(self.namespace, label_selector=selector,
                                                     _preload_content=False, _request_timeout=API_TIMEOUT_S)
            return [PodView.from_json(pod) for pod in json.loads(response.data).get("items") or []]
        except self._exceptions.ApiException as exc:
            raise self._refused(exc, selector) from None
        except Exception as exc:  # urllib3's errors are not OSErrors (MaxRetryError, ProtocolError)
            if isinstance(exc, (OSError, ValueError)) or type(exc).__module__.startswith("urllib3"):
                raise TargetError(f"cannot reach the Kubernetes API at {self.host}: {why_unreachable(exc)}") from None
            raise

    def _refused(self, exc: Any, selector: str) -> Exception:
        message = status_message(getattr(exc, "body", None)) or str(exc.reason or "")
        where = f"pods in namespace {self.namespace}"
        if exc.status == 400:
            return ConfigError(f"the Kubernetes API refused --k8s-selector {selector!r}: {message}")
        if exc.status in (401, 403):
            return TargetError(f"the Kubernetes API at {self.host} does not let soak list {where} (HTTP "
                               f"{exc.status}: {message}); the account needs get, list and watch on pods "
                               "(docs/deploy/k8s-soak-job.yaml)")
        return TargetError(f"the Kubernetes API at {self.host} answered HTTP {exc.status} listing {where}: {message}")


def status_message(body: Any) -> str:
    """The `message` of the Status object an API error carries, else ''."""
    try:
        return str(json.loads(body).get("message") or "")
    except (TypeError, ValueError, AttributeError):
        return ""


def why_unreachable(exc: BaseException) -> str:
    """The socket's own words (`[Errno 111] Connection refused`) out of urllib3's wrapping, when it has them."""
    text = first_line(getattr(exc, "reason", None) or exc)
    return text[text.index("[Errno"):] if "[Errno" in text else text


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def default_namespace(kubernetes: Any, in_cluster: bool) -> str:
    """The pod's own namespace inside a cluster, else the kubeconfig context's, else `default`."""
    if in_cluster:
        try:
            return NAMESPACE_FILE.read_text(encoding="utf-8").strip() or "default"
        except OSError:
            return "default"
    try:
        _, active = kubernetes.config.list_kube_config_contexts(os.environ.get("KUBECONFIG") or None)
        return (active or {}).get("context", {}).get("namespace") or "default"
    except Exception:  # the config loaded already; a context without a namespace is the default one
        return "default"


@dataclass(frozen=True)
class Discovery:
    """The pods of a fleet as found: their namespace and one replica each (named after its pod)."""

    namespace: str
    replicas: tuple[ReplicaSpec, ...]


def discover(selector: str, namespace: str | None, port: str | None) -> Discovery:
    """The running, ready pods `selector` matches, as replicas; TargetError (one line) when there is none."""
    lister = PodLister(namespace)
    pods = lister.list(selector)
    where = f"in namespace {lister.namespace} of {lister.host}"
    if not pods:
        raise TargetError(f"no pod matches --k8s-selector {selector!r} {where}")
    ready = sorted((pod for pod in pods if pod.ready and pod.ip), key=lambda pod: pod.name)
    if not ready:
        states = ", ".join(f"{pod.name} {pod.state()}" for pod in pods[:5])
        raise TargetError(f"{len(pods)} pod(s) match --k8s-selector {selector!r} {where} but none is running and "
                          f"ready ({states})")
    skipped = [pod.name for pod in pods if pod not in ready]
    if skipped:
        log.warning("pods not running and ready, left out of the fleet: %s", ", ".join(skipped))
    return Discovery(lister.namespace, tuple(ReplicaSpec(name=pod.name, url=pod_url(pod, port)) for pod in ready))


class PodTarget(ExternalTarget):
    """A replica's server in a pod: an external target that also watches its pod through the API."""

    WATCH_EVERY_S = WATCH_EVERY_S

    def __init__(self, config: RunConfig, run_dir: Path):
        super().__init__(config, run_dir)
        target = config.target
        self.selector, self.port = target.k8s_selector or "", target.k8s_port
        self.known = set(target.k8s_pods)  # the fleet's pods as found: each is its own replica's
        self.claims = config.out_dir / CLAIMS_FOLDER
        self.lister: PodLister | None = None
        self.pod: PodView | None = None
        self.lost: str | None = None  # the pod that went, while no replacement is ready
        self._watched_at = float("-inf")

    def start(self) -> ServerInfo:
        """The server as an external target, and the pod's state now: what later restarts are counted from."""
        info = super().start()
        self.watch_from_now()
        return info

    def watch_from_now(self) -> None:
        """Read the pod as it is now; TargetError when it is gone already."""
        self.lister = PodLister(self.config.target.k8s_namespace)
        name = self.config.replica
        self.pod = next((pod for pod in self.lister.list(self.selector) if pod.name == name), None)
        if self.pod is None:
            raise TargetError(f"pod {name} no longer matches --k8s-selector {self.selector!r}")

    def changes(self) -> list[ServerChange]:
        """What the pod did since the last look (at most every WATCH_EVERY_S): restarts, a replacement."""
        now = time.monotonic()
        if self.lister is None or self.pod is None or now - self._watched_at < self.WATCH_EVERY_S:
            return []
        self._watched_at = now
        try:
            pods = self.lister.list(self.selector)
        except (TargetError, ConfigError) as exc:  # the API's trouble, not the server's: look again next time
            log.warning("pod %s not watched this time: %s", self.pod.name, exc)
            return []
        return watch_step(self, pods)

    def follow(self, pod: PodView, previous: str) -> ServerChange:
        """The run's server is now `pod`: the same base URL everywhere the target hands it out."""
        url = pod_url(pod, self.port)
        if self.info is not None:
            old = self.info.base_url
            self.info.base_url = url
            self.info.metrics_urls[:] = [url + "/metrics" if u == old + "/metrics" else u
                                         for u in self.info.metrics_urls]
        self.pod, self.lost = pod, None
        message = (f"pod {previous} replaced by pod {pod.name} at {url}" if pod.name != previous
                   else f"pod {pod.name} replaced (a new pod of that name) at {url}")
        return ServerChange("moved", f"{message}; the run follows it",
                            {"previous_pod": previous, "pod": pod.name, "uid": pod.uid, "base_url": url}, url)

    def claim(self, pod: PodView) -> bool:
        """Take a new pod for this replica, unless another replica did (the file's creation is the claim)."""
        self.claims.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.claims / pod.name, "x", encoding="utf-8") as handle:
                handle.write(self.config.replica or "")
        except FileExistsError:
            return (self.claims / pod.name).read_text(encoding="utf-8") == (self.config.replica or "")
        return True


def watch_step(target: PodTarget, pods: list[PodView]) -> list[ServerChange]:
    """One look at the pods: crashes of this replica's pod's containers, or the pod that replaced it."""
    current = target.pod
    assert current is not None
    same = next((pod for pod in pods if pod.name == current.name), None)
    if same is not None and same.uid == current.uid:
        crashes = restarted(current, same)
        target.pod = same
        return crashes
    if target.lost is None:
        target.lost = current.name
        log.info("pod %s is gone; waiting for the pod that replaces it", current.name)
    if same is not None and same.ready and same.ip:  # a StatefulSet's pod: the same name, a new uid
        return [target.follow(same, current.name)]
    fresh = sorted((pod for pod in pods if pod.ready and pod.ip and pod.name not in target.known
                    and pod.name != current.name), key=lambda pod: (pod.created, pod.name))
    replacement = next((pod for pod in fresh if target.claim(pod)), None)
    return [target.follow(replacement, current.name)] if replacement else []


def restarted(before: PodView, now: PodView) -> list[ServerChange]:
    """A crash for each container whose restart count grew since `before`."""
    changes = []
    for container, count in now.restarts.items():
        if count > before.restarts.get(container, 0):
            last = now.last_exit.get(container) or {}
            data = {"pod": now.name, "container": container, "restart_count": count,
                    "exit_code": last.get("exitCode"), "reason": last.get("reason")}
            why = f", {last['reason']}" if last.get("reason") else ""
            changes.append(ServerChange("crash", f"pod {now.name} container {container} restarted (restart count "
                                                 f"{count}{why})", data))
    return changes
