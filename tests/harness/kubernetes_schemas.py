"""Offline validation of rendered Kubernetes manifests against real schemas, strictly.

:func:`validate` takes parsed manifests (``yaml.safe_load_all``'s documents) and returns one readable error per
problem, each ``<kind>/<metadata.name>: <JSON path>: <what is wrong>``; ``[]`` means every document passed.

What is checked:

* every document is a mapping with ``apiVersion``, ``kind`` and a ``metadata`` mapping with a string ``name``;
* the custom resources Kubeflow Trainer's ``TrainJob`` and ``ClusterTrainingRuntime``
  (``trainer.kubeflow.org/v1alpha1``) and the MPI Operator's ``MPIJob`` (``kubeflow.org/v2beta1``), selected by
  apiVersion and kind, against their CRDs' ``openAPIV3Schema`` as released upstream (``tests/schemas/kubernetes/``,
  whose ``SOURCE.md`` names the tags), with ``jsonschema``. The structural-schema extensions are made strict the
  way the API server's pruning and ``kubectl apply --validate=strict`` are: an object schema with no
  ``additionalProperties`` and no ``x-kubernetes-preserve-unknown-fields: true`` admits no other field than its
  ``properties`` (a bare ``type: object`` none at all), so a misspelled or unknown field is an error;
  ``x-kubernetes-int-or-string`` admits an integer or a string, ``nullable: true`` a null (any other null is an
  error: stricter than the API server, which drops such a null, as a renderer's ``None`` is likely a slip),
  ``x-kubernetes-embedded-resource`` adds ``apiVersion``/``kind``/``metadata`` and
  ``x-kubernetes-list-type: set`` requires unique items. The top-level ``metadata`` is checked only as above;
* the built-in kinds (``v1``, ``apps``, ``batch``, ``autoscaling``, ``policy`` and the ``*.k8s.io`` groups:
  Pod, Service, ConfigMap, Secret, PersistentVolumeClaim, Job, NetworkPolicy...) with the ``kubernetes-validate``
  package's strict schemas of Kubernetes :data:`KUBERNETES_VERSION` (unknown fields are errors). That package
  stops at a document's first error, so a built-in document yields at most one schema error per run.
* any other apiVersion/kind is an error: there is no schema for it.

What is not checked: CEL rules (``x-kubernetes-validations``, e.g. TrainJob's ``managedBy`` values or the
immutability rules), the uniqueness of the keys of ``x-kubernetes-list-type: map`` lists, formats
(``int32`` ranges, ``date-time``), the built-in kinds' field formats (a resource quantity such as
``storage: "ten gigs"`` passes, as any string), defaults, admission webhooks (the Trainer's and MPI Operator's
semantic checks, e.g. that an MPIJob has exactly one ``Launcher``), and anything between documents (that a
TrainJob's ``runtimeRef`` names a runtime that exists).
"""
import functools
import json
import re
from pathlib import Path

import jsonschema
import yaml

KUBERNETES_VERSION = "1.37"  # the newest minor version kubernetes-validate 1.37.0 has schemas of

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas" / "kubernetes"

CUSTOM_SCHEMAS = {
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainjob.v1alpha1.json",
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): "clustertrainingruntime.v1alpha1.json",
    ("kubeflow.org/v2beta1", "MPIJob"): "mpijob.v2beta1.json",
}

# The API groups of Kubernetes' own kinds outside ``*.k8s.io``; "" is the core group (apiVersion ``v1``).
BUILTIN_GROUPS = frozenset({"", "apps", "batch", "autoscaling", "policy"})

_MAX_MESSAGE = 300
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def validate(documents) -> list[str]:
    """Validate parsed Kubernetes manifests; the errors found, ``[]`` when every document is valid.

    Args:
        documents: the manifests as ``yaml.safe_load_all`` gives them (dicts); ``None`` entries (empty YAML
            documents) are skipped.

    Returns:
        One string per problem, ``<kind>/<metadata.name>: <path>: <message>``, in document order and, within
        a document, by path.

    Raises:
        RuntimeError: the installed kubernetes-validate has no schemas of :data:`KUBERNETES_VERSION`.
    """
    errors: list[str] = []
    for doc in documents:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            errors.append(f"?/?: (root): the document is a {type(doc).__name__}, not a mapping")
            continue
        label = _label(doc)
        problems = _check_identity(doc)
        api_version, kind = doc.get("apiVersion"), doc.get("kind")
        if isinstance(api_version, str) and isinstance(kind, str):
            if (api_version, kind) in CUSTOM_SCHEMAS:
                problems += _check_custom(doc, CUSTOM_SCHEMAS[api_version, kind])
            elif _is_builtin(api_version):
                problems += _check_builtin(doc)
            else:
                problems.append(("(root)", f"no schema for apiVersion {api_version}, kind {kind}"))
        errors.extend(f"{label}: {path}: {message}" for path, message in sorted(set(problems)))
    return errors


def validate_yaml(text: str) -> list[str]:
    """:func:`validate` the documents of a multi-document YAML text (a ``yaml.YAMLError`` if it does not parse)."""
    return validate(list(yaml.safe_load_all(text)))


def _label(doc: dict) -> str:
    kind = doc.get("kind") if isinstance(doc.get("kind"), str) else "?"
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{kind}/{name if isinstance(name, str) else '?'}"


def _check_identity(doc: dict) -> list[tuple[str, str]]:
    problems = []
    for field in ("apiVersion", "kind"):
        if not isinstance(doc.get(field), str):
            problems.append((field, "required string field is missing" if field not in doc else "must be a string"))
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        problems.append(("metadata", "required object is missing" if metadata is None else "must be an object"))
    elif not isinstance(metadata.get("name"), str):
        problems.append(("metadata.name", "required string field is missing" if "name" not in metadata
                         else "must be a string"))
    return problems


def _is_builtin(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return group in BUILTIN_GROUPS or group.endswith(".k8s.io")


def _check_custom(doc: dict, filename: str) -> list[tuple[str, str]]:
    validator = _custom_validator(filename)
    problems = []
    for error in validator.iter_errors(doc):
        problems += _describe(error)
    return problems


def _check_builtin(doc: dict) -> list[tuple[str, str]]:
    import kubernetes_validate  # lazily: the module imports, and the custom resources validate, without it
    from kubernetes_validate import utils

    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return _describe(error)
    except kubernetes_validate.SchemaNotFoundError:
        return [("(root)", f"no schema for apiVersion {doc['apiVersion']}, kind {doc['kind']}"
                           f" in Kubernetes {KUBERNETES_VERSION}")]
    except kubernetes_validate.InvalidSchemaError as error:
        return [("(root)", f"kubernetes-validate could not read its schema: {error.message}")]
    except utils.VersionNotSupportedError as error:
        raise RuntimeError(f"the installed kubernetes-validate ({utils.__version__}) has no schemas of Kubernetes"
                           f" {KUBERNETES_VERSION}") from error
    return []


def _describe(error: jsonschema.ValidationError) -> list[tuple[str, str]]:
    """(path, message) pairs for one jsonschema error: an unknown field is named in the path itself, and a
    missing required field too."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {})
        patterns = error.schema.get("patternProperties", {})
        extras = [key for key in error.instance
                  if key not in known and not any(re.search(p, key) for p in patterns)]
        if extras:
            return [(_json_path(path + [key]), f'unknown field "{key}"') for key in extras]
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [key for key in error.validator_value if key not in error.instance]
        if missing:
            return [(_json_path(path + [key]), "required field is missing") for key in missing]
    message = error.message
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE - 3] + "..."
    return [(_json_path(path), message)]


def _json_path(parts) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "(root)"


@functools.lru_cache(maxsize=None)
def _custom_validator(filename: str) -> jsonschema.protocols.Validator:
    with open(SCHEMA_DIR / filename, encoding="utf-8") as f:
        schema = json.load(f)
    schema = _strict(schema)
    # The top-level metadata: the CRD leaves it open and _check_identity checks its name.
    schema["properties"]["metadata"] = {}
    return jsonschema.Draft202012Validator(schema)


def _strict(node, in_logic=False):
    """A copy of a CRD structural schema node whose Kubernetes extensions are plain JSON Schema, strict.

    ``in_logic``: the node is a branch of ``allOf``/``anyOf``/``oneOf``/``not``, which in a structural schema
    only adds value checks to its parent's fields and so closes no object."""
    if not isinstance(node, dict):
        return node
    out = {key: value for key, value in node.items() if key != "nullable"}
    if isinstance(node.get("properties"), dict):
        out["properties"] = {name: _strict(sub) for name, sub in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        out["items"] = _strict(node["items"])
    elif isinstance(node.get("items"), list):
        out["items"] = [_strict(sub) for sub in node["items"]]
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            out[key] = [_strict(sub, in_logic=True) for sub in node[key]]
    if isinstance(node.get("not"), dict):
        out["not"] = _strict(node["not"], in_logic=True)

    if node.get("x-kubernetes-int-or-string") and "type" not in node and "anyOf" not in node:
        out["type"] = ["integer", "string"]
    if node.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    is_object = node.get("type") == "object" or "properties" in out
    if (is_object and not in_logic and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    if node.get("nullable"):
        return {"anyOf": [{"type": "null"}, out]}
    return out
