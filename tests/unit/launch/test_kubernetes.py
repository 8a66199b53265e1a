"""hvdkeras.launch.kubernetes, trainjob, mpijob and kubernetes_pods: the file ``--dry_run --launcher kubernetes``
renders, on both targets, validated against the real schemas (tests/schemas/kubernetes/: the CRDs of Kubeflow
Trainer and the MPI Operator; Kubernetes' own for core objects, through kubernetes-validate), its restarts, volume,
placement and security, and the one line for a value Kubernetes would refuse."""
import glob
import os

import pytest
import yaml

from hvdkeras import config as config_lib
from hvdkeras import launch
from hvdkeras.common.errors import LaunchError
from hvdkeras.launch.kubernetes import KubernetesOptions, kubernetes_documents, kubernetes_manifest
from hvdkeras.launch.kubernetes_pods import parse_node_selector, parse_tolerations
from tests.harness import kubernetes_schemas
from tests.unit.helpers import REPO

IMAGE = "registry.example/hk:1.0"
APIS = ("trainjob", "mpijob")
PLACED = dict(pvc_size="20Gi", storage_class="nfs-rwx", node_selector=(("pool", "gpu"),),
              tolerations=(("gpu", "true", "NoSchedule"), ("spot", None, None)), priority_class="training-high",
              queue="team-a", memory_per_rank="6Gi", backoff_limit=2)


def digits_plan(gpus=0, config="configs/digits.yaml", hosts="a:4,b:4", np=8, **kwargs):
    cfg = config_lib.load(os.path.join(REPO, config), [])
    return launch.plan(cfg, np, hosts, gpus_per_host=gpus, cores_per_host=8, train_args=["--config", config],
                       **kwargs)


def documents(api, gpus=0, **options):
    text = kubernetes_manifest(digits_plan(gpus), IMAGE, KubernetesOptions(api=api, **options))
    return text, {d["kind"]: d for d in yaml.safe_load_all(text)}


def pod_specs(kinds):
    """Each pod template's spec by role, as the cluster would see it (TrainJob: the runtime's)."""
    if "MPIJob" in kinds:
        replicas = kinds["MPIJob"]["spec"]["mpiReplicaSpecs"]
        return {role: replicas[role]["template"]["spec"] for role in ("Launcher", "Worker")}
    jobs = kinds["ClusterTrainingRuntime"]["spec"]["template"]["spec"]["replicatedJobs"]
    return {job["name"]: job["template"]["spec"]["template"]["spec"] for job in jobs}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("config", sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "configs",
                                                                                                     "*.yaml"))))
def test_every_shipped_config_renders_on_both_targets_and_validates_against_the_schemas(api, config):
    cfg = config_lib.load(os.path.join(REPO, config), [])
    if cfg.elastic.enabled:
        pytest.skip("an elastic config runs under horovodrun only")
    p = launch.plan(cfg, 4, "a:2,b:2", cores_per_host=8, train_args=["--config", config])
    for options in (KubernetesOptions(api=api), KubernetesOptions(api=api, **PLACED)):
        text = kubernetes_manifest(p, IMAGE, options)
        assert kubernetes_schemas.validate_yaml(text) == [], text


@pytest.mark.parametrize("api", APIS)
def test_one_wrong_field_in_each_kind_is_caught(api):
    pytest.importorskip("kubernetes_validate")
    plan = digits_plan(4)
    for kind in ("TrainJob", "ClusterTrainingRuntime", "MPIJob", "NetworkPolicy", "PersistentVolumeClaim"):
        docs = kubernetes_documents(plan, IMAGE, KubernetesOptions(api=api, **PLACED))
        doc = next((d for d in docs if d["kind"] == kind), None)
        if doc is None:
            continue
        spec = doc["spec"]
        if kind == "TrainJob":
            spec["trainer"]["numProcsPerNode"] = spec["trainer"].pop("numProcPerNode")
        elif kind == "ClusterTrainingRuntime":
            spec["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["ruls"] = []
        elif kind == "MPIJob":
            spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
        elif kind == "NetworkPolicy":
            spec["podSelektor"] = spec.pop("podSelector")
        else:
            spec["acessModes"] = spec.pop("accessModes")
        errors = kubernetes_schemas.validate(docs)
        assert len(errors) == 1 and errors[0].startswith(f"{kind}/"), (kind, errors)


@pytest.mark.parametrize("gpus", [0, 4])
def test_the_trainjob_adds_up_and_refers_to_the_runtime_rendered_with_it(gpus):
    text, kinds = documents("trainjob", gpus)
    assert list(kinds) == ["ClusterTrainingRuntime", "TrainJob", "NetworkPolicy"]
    runtime, job = kinds["ClusterTrainingRuntime"], kinds["TrainJob"]
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                         "name": runtime["metadata"]["name"]}
    assert runtime["metadata"]["name"].startswith("hvdkeras-mpi-")
    mpi = runtime["spec"]["mlPolicy"]["mpi"]
    assert mpi == {"numProcPerNode": 1, "mpiImplementation": "OpenMPI", "sshAuthMountPath": "/home/mpiuser/.ssh",
                   "runLauncherAsNode": False}
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (2, 4, IMAGE)
    argv = trainer["command"] + trainer["args"]
    assert argv[:5] == ["mpirun", "-np", "8", "-x", "HOME"] and "-H" not in argv
    assert argv[-5:] == ["python", "-m", "hvdkeras.train", "--config", "configs/digits.yaml"]
    limits = trainer["resourcesPerNode"]["limits"]
    assert limits.get("nvidia.com/gpu") == (gpus or None) and limits["cpu"] == 8 and limits["memory"] == "16Gi"
    node = pod_specs(kinds)["node"]["containers"][0]
    assert node["image"] == IMAGE and node["command"] == ["/usr/sbin/sshd"]
    assert kinds["NetworkPolicy"]["spec"]["podSelector"] == {
        "matchLabels": {"jobset.sigs.k8s.io/jobset-name": job["metadata"]["name"]}}
    # the same image and rules: the same runtime, which the cluster then holds once for every such job
    assert documents("trainjob", gpus, memory_per_rank="8Gi")[1]["ClusterTrainingRuntime"] == runtime


def test_the_mpijob_adds_up():
    _, kinds = documents("mpijob", 4)
    assert list(kinds) == ["MPIJob", "NetworkPolicy"]
    job = kinds["MPIJob"]
    replicas = job["spec"]["mpiReplicaSpecs"]
    launcher, = replicas["Launcher"]["template"]["spec"]["containers"]
    worker, = replicas["Worker"]["template"]["spec"]["containers"]
    assert replicas["Launcher"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 2
    assert job["spec"]["slotsPerWorker"] == 4 and launcher["image"] == worker["image"] == IMAGE
    argv = launcher["command"] + launcher["args"]
    assert argv[:5] == ["mpirun", "-np", "8", "-x", "HOME"] and "-H" not in argv
    limits = worker["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 4 and limits["cpu"] == 8 and limits["memory"] == "16Gi"
    assert worker["resources"]["requests"] == limits
    assert kinds["NetworkPolicy"]["spec"]["podSelector"] == {
        "matchLabels": {"training.kubeflow.org/job-name": job["metadata"]["name"]}}


def test_a_preemption_requeues_uncounted_a_one_line_error_fails_at_once_and_a_crash_is_retried_a_bounded_time():
    text, kinds = documents("trainjob", backoff_limit=2)
    jobs = kinds["ClusterTrainingRuntime"]["spec"]["template"]["spec"]
    assert jobs["failurePolicy"] == {"maxRestarts": 0}  # a failed job is not started over as a whole
    for job in jobs["replicatedJobs"]:
        spec = job["template"]["spec"]
        assert spec["backoffLimit"] == 2 and spec["template"]["spec"]["restartPolicy"] == "Never"
        rules = spec["podFailurePolicy"]["rules"]
        assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
        assert rules[1] == {"action": "Ignore", "onExitCodes": {"containerName": "node", "operator": "In",
                                                                "values": [75]}}
        assert rules[2] == {"action": "FailJob", "onExitCodes": {"containerName": "node", "operator": "In",
                                                                 "values": [2]}}
    assert "a launcher that exits 75 is started again, not counted" in text and "*id0" not in text  # no anchors
    text, kinds = documents("mpijob", backoff_limit=2)
    assert kinds["MPIJob"]["spec"]["runPolicy"]["backoffLimit"] == 2
    assert "the MPIJob cannot tell exit 75 apart" in text


@pytest.mark.parametrize("api", APIS)
def test_the_workdir_is_a_claim_mounted_at_one_path_in_every_pod(api):
    _, kinds = documents(api, pvc="team-scratch")
    assert "PersistentVolumeClaim" not in kinds
    specs = pod_specs(kinds)
    if api == "trainjob":  # the job's volume and mounts reach the runtime's pods through its patches
        patches = kinds["TrainJob"]["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
        specs = {job["name"]: job["template"]["spec"]["template"]["spec"] for job in patches["replicatedJobs"]}
    assert len(specs) == 2
    for spec in specs.values():
        work = next(v for v in spec["volumes"] if v["name"] == "work")
        assert work == {"name": "work", "persistentVolumeClaim": {"claimName": "team-scratch"}}
        (container,) = spec["containers"]
        assert {"name": "work", "mountPath": "/home/mpiuser/runs/digits"} in container["volumeMounts"]
    _, kinds = documents(api, pvc_size="20Gi", storage_class="nfs-rwx")
    claim = kinds["PersistentVolumeClaim"]
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "20Gi"}},
                             "storageClassName": "nfs-rwx"}


@pytest.mark.parametrize("api", APIS)
def test_without_a_shared_volume_the_dry_run_says_a_restarted_job_cannot_resume(api, tmp_path):
    text = launch.dry_run(os.path.join(REPO, "configs", "digits.yaml"), np=4, hosts="a:2,b:2", launcher="kubernetes",
                          cores_per_host=4, kubernetes=KubernetesOptions(api=api))
    (line,) = [t for t in text.splitlines() if t.startswith("workdir volume")]
    assert line.endswith("warning: the workdir is an emptyDir that goes with the pods: a restarted or requeued job"
                         " cannot resume; pass --kubernetes_pvc NAME (a ReadWriteMany claim) or --kubernetes_pvc_size"
                         " 20Gi")
    (launcher,) = [t for t in text.splitlines() if t.startswith("launcher")]
    needs = "Kubeflow Trainer v2.3.0 or later with JobSet" if api == "trainjob" else "the MPI Operator v0.5"
    assert needs in launcher
    assert f"--- {'TrainJob' if api == 'trainjob' else 'MPIJob'} manifest ---" in text
    text = launch.dry_run(os.path.join(REPO, "configs", "digits.yaml"), np=4, hosts="a:2,b:2", launcher="kubernetes",
                          cores_per_host=4, kubernetes=KubernetesOptions(api=api, pvc="scratch"))
    assert "PersistentVolumeClaim scratch (ReadWriteMany), mounted in every pod" in text and "cannot resume" not in text


@pytest.mark.parametrize("api", APIS)
def test_placement_comes_from_the_flags_with_the_defaults_written_out(api):
    text, kinds = documents(api)
    assert kinds[{"trainjob": "TrainJob", "mpijob": "MPIJob"}[api]]["metadata"]["labels"] == {}
    assert ("# Placement: node selector none; tolerations none; priority class none (the cluster default); Kueue"
            " queue none; 4Gi per rank.") in text
    text, kinds = documents(api, **PLACED)
    job = kinds[{"trainjob": "TrainJob", "mpijob": "MPIJob"}[api]]
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    specs = pod_specs(kinds)
    placed = specs
    if api == "trainjob":
        patches = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        placed = {j["name"]: j["template"]["spec"]["template"]["spec"] for j in patches}
    for role, spec in placed.items():
        assert spec["nodeSelector"] == {"pool": "gpu"}, role
        assert spec["tolerations"] == [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                                       {"key": "spot", "operator": "Exists"}]
    assert all(spec["priorityClassName"] == "training-high" for spec in specs.values())
    assert "per rank" in text and "6Gi" in text


@pytest.mark.parametrize("api", APIS)
def test_every_pod_runs_as_a_user_on_a_read_only_root_without_a_token(api):
    text, kinds = documents(api)
    assert "--allow-run-as-root" not in text
    for role, spec in pod_specs(kinds).items():
        assert spec["automountServiceAccountToken"] is False, role
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1000
        (container,) = spec["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}  # sshd on 2222 needs none
    (ingress,) = kinds["NetworkPolicy"]["spec"]["ingress"]
    assert ingress == {"from": [{"podSelector": kinds["NetworkPolicy"]["spec"]["podSelector"]}]}


@pytest.mark.parametrize("options, line", [
    (dict(api="tfjob"), "--kubernetes_api 'tfjob' is not one of trainjob, mpijob"),
    (dict(pvc="Team_Scratch"), "--kubernetes_pvc 'Team_Scratch' is not a Kubernetes name"),
    (dict(pvc="a", pvc_size="1Gi"), "--kubernetes_pvc names a claim that exists; --kubernetes_pvc_size and"),
    (dict(storage_class="nfs"), "--kubernetes_storage_class needs --kubernetes_pvc_size"),
    (dict(pvc_size="ten gigs"), "--kubernetes_pvc_size 'ten gigs' is not a Kubernetes quantity"),
    (dict(memory_per_rank="4GB"), "--kubernetes_memory_per_rank '4GB' is not a Kubernetes quantity"),
    (dict(queue="team a"), "--kubernetes_queue 'team a' is not a Kubernetes name"),
    (dict(backoff_limit=-1), "--kubernetes_backoff_limit must be 0 or more (Received: -1)"),
    (dict(image="Registry/HK:latest"), "--image 'Registry/HK:latest' is not an image reference"),
])
def test_a_value_kubernetes_would_refuse_is_one_line(options, line):
    with pytest.raises(LaunchError) as caught:
        kubernetes_manifest(digits_plan(), options.pop("image", IMAGE), KubernetesOptions(**options))
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


def test_node_selectors_and_tolerations_are_parsed_or_refused_in_one_line():
    assert parse_node_selector("pool=gpu, cloud.google.com/gke-spot=true") == (
        ("pool", "gpu"), ("cloud.google.com/gke-spot", "true"))
    assert parse_tolerations("gpu=true:NoSchedule,spot,dedicated:NoExecute") == (
        ("gpu", "true", "NoSchedule"), ("spot", None, None), ("dedicated", None, "NoExecute"))
    with pytest.raises(LaunchError, match=r"^--kubernetes_node_selector: 'pool' is not key=value$"):
        parse_node_selector("pool")
    with pytest.raises(LaunchError, match=r"^--kubernetes_node_selector: 'pool=\$\(id\)' is not a label"):
        parse_node_selector("pool=$(id)")
    with pytest.raises(LaunchError, match=r"^--kubernetes_tolerations: 'gpu:Never' has the effect 'Never', not one"):
        parse_tolerations("gpu:Never")


@pytest.mark.parametrize("workdir", [".", "/", "../../tmp", ".ssh", ".ssh/keys"])
def test_a_workdir_mounted_over_the_home_the_root_or_the_keys_is_one_line(workdir):
    p = launch.plan(
        config_lib.load(os.path.join(REPO, "configs", "digits.yaml"), []), 8, "a:4,b:4", cores_per_host=8,
        train_args=["--config", "configs/digits.yaml", "--workdir", workdir])
    with pytest.raises(LaunchError, match=r"would be mounted over .* in the pods; pass a folder of its own"):
        kubernetes_manifest(p, IMAGE)


def test_the_default_target_is_the_trainjob_and_the_default_image_the_containerfiles_tag():
    kinds = [d["kind"] for d in yaml.safe_load_all(launch.render_command(digits_plan(), "kubernetes"))]
    assert kinds == ["ClusterTrainingRuntime", "TrainJob", "NetworkPolicy"]
    assert launch.DEFAULT_IMAGE == "hvdkeras:latest"
