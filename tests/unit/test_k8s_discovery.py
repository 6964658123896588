"""Kubernetes discovery against a fake API server (tests/support/fake_k8s.py, real HTTP on 127.0.0.1): the pods a
selector finds become named replicas, every error is one line, and a replica's watch turns a container restart
into a crash and a replaced pod into a move its run follows."""

from __future__ import annotations

import pytest

from soak.config import ReplicaSpec, RunConfig, resolve_config
from soak.errors import ConfigError, TargetError
from soak.run.fleet import plan_fleet
from soak.target import make_target
from soak.target.base import ServerInfo
from soak.target.k8s import PodLister, PodTarget, discover
from support.fake_k8s import FakeKubernetes, selector_matches


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A fake API server, and the environment pointing the client at it through a kubeconfig."""
    with FakeKubernetes() as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield fake


def k8s_config(tmp_path, **flags) -> RunConfig:
    return resolve_config({"duration": "10m", "out": str(tmp_path), "k8s_selector": "app=vllm", **flags}, environ={})


# -- finding the pods ----------------------------------------------------------------------------------------
def test_the_ready_pods_a_selector_matches_are_the_replicas_named_after_them(cluster):
    cluster.add_pod("vllm-1", ip="10.0.0.2", ports=[("metrics", 9090), ("http", 8001)])
    cluster.add_pod("vllm-0", ip="10.0.0.1", ports=[(None, 8000)])
    cluster.add_pod("vllm-2", ip="10.0.0.3", ready=False)
    cluster.add_pod("other", ip="10.0.0.4", labels={"app": "sglang"})
    found = discover("app=vllm", None, None)
    assert found.namespace == "default"
    # the port named http, else the first declared; the pod not ready and the other app left out
    assert found.replicas == (ReplicaSpec(name="vllm-0", url="http://10.0.0.1:8000"),
                              ReplicaSpec(name="vllm-1", url="http://10.0.0.2:8001"))
    assert cluster.lists == ["app=vllm"]


@pytest.mark.parametrize("port, urls", [("9090", ["http://10.0.0.1:9090", "http://[fd00::2]:9090"]),
                                        ("metrics", ["http://10.0.0.1:9091", "http://[fd00::2]:9092"])])
def test_the_port_is_named_or_numbered(cluster, port, urls):
    cluster.add_pod("a", ip="10.0.0.1", ports=[("http", 8000), ("metrics", 9091)])
    cluster.add_pod("b", ip="fd00::2", ports=[("metrics", 9092), ("http", 8000)])
    assert [spec.url for spec in discover("app=vllm", None, port).replicas] == urls


def test_the_namespace_is_the_flags_else_the_kubeconfig_contexts(cluster, tmp_path, monkeypatch):
    cluster.add_pod("vllm-0", namespace="serving")
    assert [spec.name for spec in discover("app=vllm", "serving", None).replicas] == ["vllm-0"]
    monkeypatch.setenv("KUBECONFIG", str(cluster.write_kubeconfig(tmp_path / "ns-config", namespace="serving")))
    assert discover("app=vllm", None, None).namespace == "serving"


@pytest.mark.parametrize("setup, selector, port, error, message", [
    (lambda fake: None, "app=vllm", None, TargetError,
     "no pod matches --k8s-selector 'app=vllm' in namespace default of http://127.0.0.1:"),
    (lambda fake: fake.add_pod("vllm-0", ready=False), "app=vllm", None, TargetError,
     "1 pod(s) match --k8s-selector 'app=vllm' in namespace default of http://127.0.0.1:"),
    (lambda fake: fake.add_pod("vllm-0"), "app in (vllm", None, ConfigError,
     "the Kubernetes API refused --k8s-selector 'app in (vllm': unable to parse requirement"),
    (lambda fake: fake.add_pod("vllm-0"), "app=vllm", "grpc", TargetError,
     "pod vllm-0 has no container port named 'grpc' (--k8s-port)"),
    (lambda fake: fake.add_pod("vllm-0", ports=[]), "app=vllm", None, TargetError,
     "pod vllm-0 declares no container port: name the server's with --k8s-port"),
    (lambda fake: setattr(fake, "down", True), "app=vllm", None, TargetError,
     "answered HTTP 500 listing pods in namespace default: etcdserver: request timed out"),
])
def test_what_cannot_be_found_is_one_line(cluster, setup, selector, port, error, message):
    setup(cluster)
    with pytest.raises(error) as caught:
        discover(selector, None, port)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_an_api_server_that_is_gone_is_one_line(cluster):
    cluster.close()
    with pytest.raises(TargetError, match=r"^cannot reach the Kubernetes API at http://127\.0\.0\.1:\d+: "
                                          r"\[Errno 111\] Connection refused$"):
        discover("app=vllm", None, None)


def test_a_token_the_api_refuses_names_the_rights_needed(cluster, tmp_path, monkeypatch):
    path = cluster.write_kubeconfig(tmp_path / "bad-token")
    path.write_text(path.read_text().replace("fake-k8s-token", "wrong"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(TargetError, match="does not let soak list pods in namespace default .HTTP 401: Unauthorized.; "
                                          "the account needs get, list and watch on pods"):
        discover("app=vllm", None, None)


def test_no_kubeconfig_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match=r"^--k8s-selector: no usable Kubernetes configuration in the kubeconfig"):
        PodLister()


def test_inside_a_pod_without_a_service_account_is_a_config_error(monkeypatch):
    from soak.target.k8s import NAMESPACE_FILE

    if NAMESPACE_FILE.with_name("token").exists():
        pytest.skip("this machine is a pod with a service account")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    with pytest.raises(ConfigError, match=r"^--k8s-selector: no usable Kubernetes configuration in the pod's "
                                          r"service account: "):
        PodLister()


def test_without_the_client_the_error_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # what an interpreter without the package imports
    with pytest.raises(ConfigError, match=r"^--k8s-selector needs the Kubernetes client: pip install 'soak\[k8s\]'$"):
        discover("app=vllm", None, None)


@pytest.mark.parametrize("selector, labels, matches", [
    ("app=vllm", {"app": "vllm"}, True), ("app==vllm,tier!=canary", {"app": "vllm", "tier": "canary"}, False),
    ("app in (vllm, sglang)", {"app": "sglang"}, True), ("!tier", {"app": "vllm"}, True), ("tier", {}, False),
])
def test_the_fake_server_selects_as_the_api_does(selector, labels, matches):
    assert selector_matches(selector, labels) == matches


# -- the settings and the plan -------------------------------------------------------------------------------
@pytest.mark.parametrize("flags, message", [
    ({"target": ["http://h:1"]}, "--k8s-selector finds the fleet's replicas itself; it cannot be combined with --target"),
    ({"targets_file": "fleet.txt"}, "cannot be combined with --targets-file"),
    ({"replica": ["a=http://h:1,GPU-1"]}, "cannot be combined with --replica"),
    ({"router": "http://h:9"}, "cannot be combined with --router"),
    ({"model": "tiny"}, "cannot be combined with --model"),
    ({"k8s_port": "Http_"}, "invalid setting k8s-port (--k8s-port): a container port is a number from 1 to 65535"),
    ({"k8s_namespace": "Serving"}, "invalid setting k8s-namespace (--k8s-namespace): a namespace is lower-case"),
    ({"k8s_selector": " "}, "the label selector is empty"),
])
def test_a_selector_that_cannot_be_is_one_config_error(tmp_path, flags, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        k8s_config(tmp_path, **flags)


def test_a_selector_makes_a_fleet_whose_replicas_are_the_pods(cluster, tmp_path):
    cluster.add_pod("vllm-0", ip="10.0.0.1")
    cluster.add_pod("vllm-1", ip="10.0.0.2")
    config = k8s_config(tmp_path, rate="4", k8s_port="http")
    assert config.target.is_fleet and config.target.kind == "external"
    plan = plan_fleet(config, fleet_id="F")
    assert [spec.name for spec, _ in plan.replicas] == ["vllm-0", "vllm-1"]
    assert plan.config.target.k8s_pods == ("vllm-0", "vllm-1") and plan.config.target.k8s_namespace == "default"
    for spec, replica in plan.replicas:
        assert replica.target.url == spec.url and not replica.target.is_fleet and replica.load.rate_rps == 2.0
        assert RunConfig.model_validate_json(replica.model_dump_json()) == replica  # its trip to its process
        assert isinstance(make_target(replica, tmp_path), PodTarget)
    # the fleet's stored config reads back (the fleet's summary takes its replicas from it)
    assert RunConfig.model_validate_json(plan.config.model_dump_json()).target.replicas == plan.config.target.replicas


@pytest.mark.parametrize("args, message", [
    ([], "soak: error: no pod matches --k8s-selector 'app=vllm' in namespace default of http://127.0.0.1:"),
    (["--target", "http://127.0.0.1:1"], "soak: error: invalid target: --k8s-selector finds the fleet's replicas "
                                         "itself; it cannot be combined with --target"),
])
def test_a_fleet_that_cannot_be_found_is_one_line_and_exit_2(cluster, soak_cli, tmp_path, args, message):
    cluster.add_pod("vllm-0", labels={"app": "sglang"})
    result = soak_cli("start", "--duration", "1m", "--out", str(tmp_path), "--k8s-selector", "app=vllm", *args,
                      env={"KUBECONFIG": str(tmp_path / "kubeconfig")}, timeout_s=60)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(message)
    assert not (tmp_path / "soak.db").exists()


# -- a replica's watch ---------------------------------------------------------------------------------------
def watching(cluster, tmp_path, name: str) -> PodTarget:
    """The PodTarget of replica `name` of the fleet the cluster holds now, as after its start (its server's
    description made up: only the watch is under test here)."""
    plan = plan_fleet(k8s_config(tmp_path), fleet_id="F")
    spec, config = next((spec, config) for spec, config in plan.replicas if spec.name == name)
    target = make_target(config, tmp_path / name)
    target.info = ServerInfo(kind="external", base_url=spec.url, model="m", metrics_urls=[spec.url + "/metrics"])
    target.watch_from_now()
    target.WATCH_EVERY_S = 0.0
    return target


def test_a_container_restart_is_a_crash_of_that_pod_alone(cluster, tmp_path):
    cluster.add_pod("vllm-0", ip="10.0.0.1", containers=("vllm", "sidecar"))
    cluster.add_pod("vllm-1", ip="10.0.0.2")
    cluster.restart_container("vllm-0")  # before the run: not this run's crash
    zero, one = watching(cluster, tmp_path, "vllm-0"), watching(cluster, tmp_path, "vllm-1")
    assert zero.changes() == [] and one.changes() == []
    cluster.restart_container("vllm-0", "sidecar", exit_code=1, reason="Error")
    cluster.restart_container("vllm-0", "vllm")
    [vllm, sidecar] = zero.changes()  # in the order of the pod's containers
    assert (vllm.kind, vllm.base_url) == ("crash", None)
    assert vllm.message == "pod vllm-0 container vllm restarted (restart count 2, OOMKilled)"
    assert vllm.data == {"pod": "vllm-0", "container": "vllm", "restart_count": 2, "exit_code": 137,
                         "reason": "OOMKilled"}
    assert sidecar.message == "pod vllm-0 container sidecar restarted (restart count 1, Error)"
    assert zero.changes() == [] and one.changes() == []  # each restart told once, to its own replica


def test_a_replaced_pod_is_followed_and_a_new_one_claimed_by_one_replica(cluster, tmp_path):
    for n in range(3):
        cluster.add_pod(f"vllm-{n}", ip=f"10.0.0.{n}")
    replicas = {name: watching(cluster, tmp_path, name) for name in ("vllm-0", "vllm-1", "vllm-2")}
    cluster.delete_pod("vllm-0")
    cluster.delete_pod("vllm-1")
    assert replicas["vllm-0"].changes() == []  # gone, no replacement yet: its health says the rest
    cluster.add_pod("vllm-7f9c", ip="10.0.0.9", ports=[("http", 8001)])
    [moved] = replicas["vllm-1"].changes()
    assert moved.kind == "moved" and moved.base_url == "http://10.0.0.9:8001"
    assert moved.message == "pod vllm-1 replaced by pod vllm-7f9c at http://10.0.0.9:8001; the run follows it"
    assert replicas["vllm-1"].info.base_url == moved.base_url
    assert replicas["vllm-1"].info.metrics_urls == ["http://10.0.0.9:8001/metrics"]
    assert replicas["vllm-0"].changes() == [] and replicas["vllm-2"].changes() == []  # claimed by vllm-1 already
    cluster.add_pod("vllm-8d2e", ip="10.0.0.10")
    assert [c.base_url for c in replicas["vllm-0"].changes()] == ["http://10.0.0.10:8000"]
    cluster.restart_container("vllm-7f9c")  # the new pod's restarts are counted from its own start
    assert [c.message for c in replicas["vllm-1"].changes()] == [
        "pod vllm-7f9c container vllm restarted (restart count 1, OOMKilled)"]


def test_a_statefulset_pod_replaced_under_its_name_is_followed_to_its_new_address(cluster, tmp_path):
    cluster.add_pod("vllm-0", ip="10.0.0.1")
    target = watching(cluster, tmp_path, "vllm-0")
    cluster.delete_pod("vllm-0")
    cluster.add_pod("vllm-0", ip="10.0.0.5", ready=False)
    assert target.changes() == []  # not ready yet
    cluster.add_pod("vllm-0", ip="10.0.0.5")
    [moved] = target.changes()
    assert moved.message == "pod vllm-0 replaced (a new pod of that name) at http://10.0.0.5:8000; the run follows it"
    assert target.info.base_url == "http://10.0.0.5:8000"


def test_an_api_that_fails_mid_run_is_not_the_servers_fault(cluster, tmp_path):
    cluster.add_pod("vllm-0", ip="10.0.0.1")
    target = watching(cluster, tmp_path, "vllm-0")
    cluster.down = True
    assert target.changes() == []
    cluster.down = False
    cluster.restart_container("vllm-0")
    assert len(target.changes()) == 1


# -- the manifest in docs/deploy -----------------------------------------------------------------------------
def test_the_deploy_job_may_list_pods_and_runs_soak_start_with_a_selector_that_misses_itself():
    from pathlib import Path

    from soak.cli.start import start, start_flags

    yaml = pytest.importorskip("yaml")
    path = Path(__file__).resolve().parents[2] / "docs" / "deploy" / "k8s-soak-job.yaml"
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(path.read_text())}
    account, role, binding, job = docs["ServiceAccount"], docs["Role"], docs["RoleBinding"], docs["Job"]
    [rule] = role["rules"]
    assert rule["resources"] == ["pods"] and set(rule["verbs"]) == {"get", "list", "watch"}
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"]}]
    pod = job["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == account["metadata"]["name"]
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["soak", "start"]
    config = resolve_config(start_flags(dict(start.make_context("start", container["args"]).params)), environ={})
    assert config.target.k8s_selector == "app=vllm" and config.target.is_fleet and config.duration_s == 86400
    assert not selector_matches(config.target.k8s_selector, pod["metadata"]["labels"])
