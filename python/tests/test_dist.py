"""The fleet files under dist/: the Kubernetes DaemonSet validated against the Kubernetes
schemas (kubernetes-validate bundles them, so this runs offline), and the Grafana
dashboard's structure. That every dashboard query names only metrics the daemon exports is
checked against a real exposition in crates/numaio-proc/tests/fleet.rs."""

import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DAEMONSET = os.path.join(REPO, "dist", "kubernetes", "numaio-daemonset.yaml")
DASHBOARD = os.path.join(REPO, "dist", "grafana", "numaio-dashboard.json")

# The Kubernetes release the manifest must validate against (its schemas ship with
# kubernetes-validate), and the oldest still checked: hostPID, seccompProfile and the
# capability names have not changed between them.
K8S_VERSIONS = ["1.29.0", "1.33.0"]


def _skip(request, what, why):
    # conftest's helper, imported lazily: conftest needs the advisor's dependencies.
    from conftest import skip_visibly

    skip_visibly(request, what, why)


def _documents(request):
    try:
        import yaml
    except ImportError:
        _skip(request, "pyyaml", "PyPI package PyYAML is not installed (scripts/setup-python.sh)")
    with open(DAEMONSET) as f:
        return [d for d in yaml.safe_load_all(f) if d]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_daemonset_validates_against_kubernetes_schemas(request, version):
    try:
        import kubernetes_validate
    except ImportError:
        _skip(
            request,
            "kubernetes-validate",
            "PyPI package kubernetes-validate is not installed (scripts/setup-python.sh)",
        )
    docs = _documents(request)
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace", "ConfigMap", "DaemonSet"], kinds
    for d in docs:
        # strict: an unknown field (a typo) is an error, not ignored.
        kubernetes_validate.validate(d, version, strict=True)


def test_daemonset_runs_with_least_privilege(request):
    ds = [d for d in _documents(request) if d["kind"] == "DaemonSet"][0]
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True, "the daemon places the host's processes"
    assert not pod.get("hostNetwork"), "it serves nothing; metrics go through the textfile"
    assert pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) == {
        "SYS_NICE",
        "SYS_PTRACE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "BPF",
        "PERFMON",
    }
    assert "SYS_ADMIN" not in sc["capabilities"]["add"]
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"]
    assert c["args"][:3] == ["daemon", "--config", "/etc/numaio/numaio.toml"]
    assert "ports" not in c
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert mounts["sys"]["readOnly"] is True and vols["sys"]["hostPath"]["path"] == "/sys"
    assert vols["textfile"]["hostPath"]["path"] == "/var/lib/node_exporter/textfile_collector"
    assert mounts["textfile"]["mountPath"] == "/var/lib/numaio/textfile"
    # Every capability is explained next to it.
    with open(DAEMONSET) as f:
        text = f.read()
    for cap in sc["capabilities"]["add"]:
        before = text.split(f"- {cap}\n")[0].rsplit("add:", 1)[-1]
        assert "#" in before, f"{cap} has no comment saying why"


def test_dashboard_structure():
    with open(DASHBOARD) as f:
        d = json.load(f)
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "instance"], names
    ids = set()
    queries = 0
    for p in d["panels"]:
        assert p["id"] not in ids, f"duplicate panel id {p['id']}"
        ids.add(p["id"])
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        assert g["h"] > 0 and g["y"] >= 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["type"] in {"timeseries", "table", "stat", "gauge", "bargauge"}, p["type"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p.get("description"), f"panel {p['title']!r} has no description"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)) and refs, p["title"]
        for t in p["targets"]:
            expr = t["expr"]
            assert expr.strip(), p["title"]
            assert expr.count("(") == expr.count(")"), expr
            assert expr.count("{") == expr.count("}"), expr
            # Every numaio query follows the instance variable.
            if "numaio_" in expr:
                assert 'instance=~"$instance"' in expr, expr
            # The NUMA node is numa_node in numaio's metrics.
            assert "numaio_" not in expr or " node)" not in expr and "(node" not in expr, expr
            queries += 1
    assert queries >= 10
