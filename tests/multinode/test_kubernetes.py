"""The torchrun page's Kubernetes section: snippets/launch/k8s_ddp.yaml, checked without a cluster.

- Every document of the manifest is valid against the official schemas of the Kubernetes versions the page
  names, offline (kubernetes-validate ships the schemas) and strictly: an unknown field fails.
- The structure the page relies on: an Indexed Job whose pods find pod 0 through a headless Service, one pod
  per node, torchrun starting one worker per GPU the pod gets, and the calculator's command
  (tests/site/test_calculators.py compares it with what the calculator prints).
- The pods' command, read from the manifest, runs on the two-host test bed (testbed.py) with what a pod gets:
  the host name <job>-<index>, JOB_COMPLETION_INDEX, and the other pods' DNS names <job>-<index>.<service>.
  Only the script's path inside the image is replaced by the repository's copy, and the Job is adapted to nodes
  without GPUs as the manifest's header and the page say (no GPU limit, NPROC_PER_NODE=1); DDP runs on gloo.
"""

import copy
import os
import re
import shlex
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from recording import TRAIN_LINES

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "snippets" / "launch" / "k8s_ddp.yaml"
TRAIN = ROOT / "snippets" / "ddp" / "train_torchrun.py"  # the program the image holds
IMAGE_SCRIPT = "/workspace/train_torchrun.py"  # its path inside the image, a placeholder of the manifest
K8S_VERSIONS = ("1.25", "1.37")  # the page's validation command; Indexed Jobs are stable since 1.24
NAMESPACE = "default"  # the manifest names none: kubectl applies it to the current one

DOCUMENTS = [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d]
SERVICE = next(d for d in DOCUMENTS if d["kind"] == "Service")
JOB = next(d for d in DOCUMENTS if d["kind"] == "Job")
POD = JOB["spec"]["template"]["spec"]
(CONTAINER,) = POD["containers"]
PODS = [f"{JOB['metadata']['name']}-{index}" for index in range(JOB["spec"]["completions"])]
# What DNS answers in a pod through the headless Service; the bed has no DNS, so each host's /etc/hosts says it.
DNS_NAMES = {pod: [f"{pod}.{SERVICE['metadata']['name']}", f"{pod}.{SERVICE['metadata']['name']}.{NAMESPACE}.svc.cluster.local"] for pod in PODS}  # fmt: skip


def torchrun_words(script: str) -> list[str]:
    """The words of the shell script the container runs, continuation lines joined, quotes removed."""
    return shlex.split(re.sub(r"\\\n", " ", script))


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d["kind"])
def test_manifest_is_valid_for_kubernetes(document, version):
    kubernetes_validate.validate(document, version, strict=True)


def test_validation_rejects_an_unknown_field():
    """The check above is not vacuous: a misspelt field fails strict validation."""
    broken = copy.deepcopy(JOB)
    broken["spec"]["completionMod"] = broken["spec"].pop("completionMode")
    with pytest.raises(kubernetes_validate.ValidationError, match="completionMod"):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


def test_manifest_has_the_structure_the_page_describes():
    assert [d["kind"] for d in DOCUMENTS] == ["Service", "Job"]  # the Service first: DNS before the pods
    spec = JOB["spec"]
    nodes = spec["completions"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == nodes  # every node's pod at once: the rendezvous waits for all of them
    assert spec["backoffLimit"] == 0 and POD["restartPolicy"] == "Never"  # a failure fails the Job, no retries
    # headless Service: selects the pods, and is their subdomain
    assert SERVICE["spec"]["clusterIP"] == "None"
    selector, labels = SERVICE["spec"]["selector"], JOB["spec"]["template"]["metadata"]["labels"]
    assert selector and selector.items() <= labels.items(), (selector, labels)
    assert POD["subdomain"] == SERVICE["metadata"]["name"]
    # the command: a shell, so that $JOB_COMPLETION_INDEX is expanded; the calculator's static rendezvous
    assert isinstance(CONTAINER["resources"]["limits"]["nvidia.com/gpu"], int)
    assert "env" not in CONTAINER  # on GPU nodes NPROC_PER_NODE is unset: torchrun counts the GPUs
    assert CONTAINER["command"][:2] == ["/bin/sh", "-c"] and len(CONTAINER["command"]) == 3
    assert torchrun_words(CONTAINER["command"][2]) == [
        "torchrun",
        f"--nnodes={nodes}",
        "--nproc-per-node=${NPROC_PER_NODE:-gpu}",  # one worker per GPU the pod gets
        "--node-rank=$JOB_COMPLETION_INDEX",
        "--rdzv-backend=static",  # c10d would ignore --node-rank (the torchrun page)
        f"--rdzv-endpoint={PODS[0]}.{SERVICE['metadata']['name']}:29500",  # pod 0 hosts the store
        IMAGE_SCRIPT,
    ]
    text = MANIFEST.read_text(encoding="utf-8")
    assert re.search(r"^ *image: .*# PLACEHOLDER", text, re.M) and re.search(rf"{IMAGE_SCRIPT}: PLACEHOLDER", text)


def on_cpu_nodes(job: dict, workers: int) -> dict:
    """The Job as the page adapts it to nodes without GPUs: no GPU limit, NPROC_PER_NODE in the container's env."""
    cpu = copy.deepcopy(job)
    (container,) = cpu["spec"]["template"]["spec"]["containers"]
    del container["resources"]["limits"]["nvidia.com/gpu"]
    container["env"] = [{"name": "NPROC_PER_NODE", "value": str(workers)}]
    return cpu


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_cpu_variant_is_valid_for_kubernetes(version):
    kubernetes_validate.validate(on_cpu_nodes(JOB, 2), version, strict=True)


@pytest.mark.parametrize("bed", [{"names": PODS, "aliases": DNS_NAMES}], ids=["pods"], indirect=True)
def test_pods_train_across_two_hosts(bed, recording):
    """Each host is a pod: its host name is <job>-<index>, it has JOB_COMPLETION_INDEX and HOSTNAME as
    Kubernetes sets them, and it runs the container's command from the manifest (torchrun from this
    interpreter's environment, as an image has it on PATH), adapted to nodes without GPUs as the page says, with
    one worker a pod: what the manifest decides (node rank, pod 0's name, the port) is the same for any number of
    workers, and a second worker a pod would only add another torch start-up on the two-core machine. train_torchrun.py asserts that the loss
    fell and that the replicas are bit-identical; rank 0, on pod 0, says so."""
    (container,) = on_cpu_nodes(JOB, workers=1)["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[-1].count(IMAGE_SCRIPT) == 1
    run = [*command[:-1], command[-1].replace(IMAGE_SCRIPT, str(TRAIN))]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    commands = {
        pod: ["env", f"JOB_COMPLETION_INDEX={index}", f"HOSTNAME={pod}", *run] for index, pod in enumerate(PODS)
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    results = bed.run_all(commands, env={**env, "PATH": path}, timeout=300)
    for r in results.values():
        assert r.returncode == 0, f"{r.host}: exit {r.returncode}, timed out {r.timed_out}:\n{r.output}"
    world = len(PODS)
    assert f"{world} ranks on cpu (gloo): replicas identical" in results[PODS[0]].output, results[PODS[0]].output
    recording("kubernetes_pods", re.findall(TRAIN_LINES, results[PODS[0]].output, re.MULTILINE))
