"""tests/harness/kubernetes_schemas.py: small hand-written manifests pass; one planted wrong field is one error,
named by its path. The built-in kinds' tests need kubernetes-validate and are skipped without it."""
import pytest

from tests.harness import kubernetes_schemas


def train_job():
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bench", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "runtimeRef": {"name": "hvdkeras-mpi", "apiGroup": "trainer.kubeflow.org",
                           "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "image": "registry.example/hvdkeras:1",
                "command": ["python", "-m", "hvdkeras.bench"],
                "numNodes": 2,
                "numProcPerNode": 1,
                "resourcesPerNode": {"limits": {"cpu": 2, "memory": "4Gi"}},
            },
        },
    }


def mpi_container(name, command):
    return {"name": name, "image": "registry.example/hvdkeras:1", "imagePullPolicy": "IfNotPresent",
            "command": command, "readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 5}}


def cluster_training_runtime():
    def replicated_job(name, command):
        return {"name": name, "template": {"spec": {"template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"containers": [mpi_container("node", command)]},
        }}}}

    launcher = replicated_job("launcher", ["mpirun", "python", "-m", "hvdkeras.bench"])
    launcher["dependsOn"] = [{"name": "node", "status": "Ready"}]
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "hvdkeras-mpi"},
        "spec": {
            "mlPolicy": {"numNodes": 2, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                                "sshAuthMountPath": "/home/mpiuser/.ssh"}},
            "template": {"spec": {
                "network": {"publishNotReadyAddresses": True},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                "replicatedJobs": [replicated_job("node", ["/usr/sbin/sshd", "-De"]), launcher],
            }},
        },
    }


def mpi_job():
    def replica(replicas, command):
        return {"replicas": replicas, "restartPolicy": "Never",
                "template": {"spec": {"containers": [mpi_container("main", command)]}}}

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "bench", "namespace": "ml"},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
            "mpiReplicaSpecs": {
                "Launcher": replica(1, ["mpirun", "python", "-m", "hvdkeras.bench"]),
                "Worker": replica(2, ["/usr/sbin/sshd", "-De"]),
            },
        },
    }


def network_policy():
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "bench-only", "namespace": "ml"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "bench"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "bench"}}}],
                         "ports": [{"protocol": "TCP", "port": 2222}]}],
        },
    }


def persistent_volume_claim():
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "datasets", "namespace": "ml"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}},
    }


def pod_spec(runtime, index=1):
    return runtime["spec"]["template"]["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]["spec"]


def test_minimal_custom_resources_are_valid():
    assert kubernetes_schemas.validate([train_job(), None, cluster_training_runtime(), mpi_job()]) == []


def test_a_misspelled_field_deep_in_a_train_job_is_one_error():
    job = train_job()
    job["spec"]["trainer"]["numProcsPerNode"] = job["spec"]["trainer"].pop("numProcPerNode")
    assert kubernetes_schemas.validate([job]) == ['TrainJob/bench: spec.trainer.numProcsPerNode: unknown field'
                                                  ' "numProcsPerNode"']


def test_a_misspelled_required_field_is_unknown_and_its_absence_named_too():
    job = train_job()
    job["spec"]["runtimeRef"]["nmae"] = job["spec"]["runtimeRef"].pop("name")
    assert kubernetes_schemas.validate([job]) == ["TrainJob/bench: spec.runtimeRef.name: required field is missing",
                                                  'TrainJob/bench: spec.runtimeRef.nmae: unknown field "nmae"']


def test_a_wrong_type_is_named_by_its_path():
    job = train_job()
    job["spec"]["trainer"]["numNodes"] = "two"
    assert kubernetes_schemas.validate([job]) == ["TrainJob/bench: spec.trainer.numNodes: 'two' is not of type"
                                                  " 'integer'"]


def test_a_misspelled_container_field_in_a_runtime_template_is_one_error():
    runtime = cluster_training_runtime()
    container = pod_spec(runtime)["containers"][0]
    container["imagePullPolice"] = container.pop("imagePullPolicy")
    assert kubernetes_schemas.validate([runtime]) == [
        "ClusterTrainingRuntime/hvdkeras-mpi: spec.template.spec.replicatedJobs[1].template.spec.template.spec"
        '.containers[0].imagePullPolice: unknown field "imagePullPolice"']


def test_a_label_key_with_dots_is_quoted_in_the_path():
    runtime = cluster_training_runtime()
    pod_spec(runtime)["nodeSelector"] = {"kubernetes.io/arch": 64}
    assert kubernetes_schemas.validate([runtime]) == [
        "ClusterTrainingRuntime/hvdkeras-mpi: spec.template.spec.replicatedJobs[1].template.spec.template.spec"
        """.nodeSelector["kubernetes.io/arch"]: 64 is not of type 'string'"""]


def test_the_runtimes_mpi_policy_takes_openmpi_only():
    runtime = cluster_training_runtime()
    runtime["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "Intel"
    assert kubernetes_schemas.validate([runtime]) == [
        "ClusterTrainingRuntime/hvdkeras-mpi: spec.mlPolicy.mpi.mpiImplementation: 'Intel' is not one of"
        " ['OpenMPI', '']"]


def test_int_or_string_takes_a_port_name_and_null_is_refused():
    runtime = cluster_training_runtime()
    pod_spec(runtime)["containers"][0]["readinessProbe"]["tcpSocket"]["port"] = "ssh"
    assert kubernetes_schemas.validate([runtime]) == []
    pod_spec(runtime)["containers"][0]["readinessProbe"]["initialDelaySeconds"] = None
    assert kubernetes_schemas.validate([runtime]) == [
        "ClusterTrainingRuntime/hvdkeras-mpi: spec.template.spec.replicatedJobs[1].template.spec.template.spec"
        ".containers[0].readinessProbe.initialDelaySeconds: None is not of type 'integer'"]


def test_a_misspelled_replica_spec_field_of_an_mpijob_is_one_error():
    job = mpi_job()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replica"] = job["spec"]["mpiReplicaSpecs"]["Worker"].pop("replicas")
    assert kubernetes_schemas.validate([job]) == ['MPIJob/bench: spec.mpiReplicaSpecs.Worker.replica: unknown field'
                                                  ' "replica"']


def test_an_mpijob_takes_its_launcher_options():
    job = mpi_job()
    job["spec"].update(runLauncherAsWorker=True, launcherCreationPolicy="WaitForWorkersReady",
                       sshAuthMountPath="/home/mpiuser/.ssh")
    assert kubernetes_schemas.validate([job]) == []


def test_an_unknown_top_level_field_and_a_missing_name_are_errors():
    job = mpi_job()
    job["specs"] = job.pop("spec")  # the CRD does not require a spec
    del job["metadata"]["name"]
    assert kubernetes_schemas.validate([job]) == ["MPIJob/?: metadata.name: required string field is missing",
                                                  'MPIJob/?: specs: unknown field "specs"']


def test_a_kind_without_a_schema_is_an_error():
    job = mpi_job()
    job["apiVersion"] = "kubeflow.org/v1"
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"}, "spec": {}}
    assert kubernetes_schemas.validate([job, jobset]) == [
        "MPIJob/bench: (root): no schema for apiVersion kubeflow.org/v1, kind MPIJob",
        "JobSet/js: (root): no schema for apiVersion jobset.x-k8s.io/v1alpha2, kind JobSet"]


def test_validate_yaml_reads_every_document_and_skips_empty_ones():
    text = "---\napiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: bench}\nspec: {}\n---\n"
    assert kubernetes_schemas.validate_yaml(text) == ["MPIJob/bench: spec.mpiReplicaSpecs: required field is"
                                                      " missing"]


def test_minimal_builtin_kinds_are_valid():
    pytest.importorskip("kubernetes_validate")
    assert kubernetes_schemas.validate([network_policy(), persistent_volume_claim()]) == []


def test_a_misspelled_network_policy_field_is_one_error():
    pytest.importorskip("kubernetes_validate")
    policy = network_policy()
    policy["spec"]["podSelektor"] = policy["spec"].pop("podSelector")
    assert kubernetes_schemas.validate([policy]) == ['NetworkPolicy/bench-only: spec.podSelektor: unknown field'
                                                     ' "podSelektor"']


def test_an_unknown_field_of_a_claim_is_one_error():
    pytest.importorskip("kubernetes_validate")
    claim = persistent_volume_claim()
    claim["spec"]["resources"]["request"] = claim["spec"]["resources"].pop("requests")
    assert kubernetes_schemas.validate([claim]) == ['PersistentVolumeClaim/datasets: spec.resources.request:'
                                                    ' unknown field "request"']


def test_a_misspelled_pod_container_field_is_one_error():
    pytest.importorskip("kubernetes_validate")
    container = mpi_container("main", ["true"])
    container["imagePullPolice"] = container.pop("imagePullPolicy")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container]}}
    assert kubernetes_schemas.validate([pod]) == ['Pod/p: spec.containers[0].imagePullPolice: unknown field'
                                                  ' "imagePullPolice"']
