#!/usr/bin/python3
"""Checks Kubernetes objects against the API schema of Debian's python3-kubernetes.

  check_kubernetes_schema.py FILE...   (multi-document YAML; - reads stdin)

Each object is walked against the model class of its kind (V1DaemonSet for
apps/v1 DaemonSet, ...), field by field through the models' attribute_map
(JSON name -> attribute) and openapi_types (attribute -> type: a model
class, list[T], dict(str, T) or a primitive), and built into that model
through its setters. Reported, each with the object and the field's path:
- a field the model does not know (the client's own deserializer drops
  these silently, so a typo such as nodeSelektor would pass it);
- a value of the wrong shape (a map where a list belongs, a string where a
  number belongs);
- a required field left out: the one the model's setter refuses None for.
Exit status 1 when anything is reported, 0 otherwise.

python3-kubernetes 22.6.0 carries the schema of Kubernetes 1.22. A field
that newer Kubernetes added is accepted only when NEWER_FIELDS names it.
ServiceMonitor (monitoring.coreos.com/v1), a custom resource the client
does not know, is checked against CUSTOM_TYPES below instead.
"""

import re
import sys

import yaml
from kubernetes import client
from kubernetes.client import models

# Fields newer than Kubernetes 1.22, accepted without a check of their
# value: (model class, JSON field name) -> (Kubernetes version that added
# it, why the manifests use it). A field is named by the model that holds
# it, so one entry covers every object that embeds that model (a PodSpec
# field, in DaemonSets and Deployments alike). None is used now: a field an
# older API server does not know fails `kubectl apply` there (strict field
# validation), so the manifests keep to 1.22's.
NEWER_FIELDS = {
    # ("V1PodSpec", "hostUsers"): ("1.25", "..."),
}

# (apiVersion, kind) -> model class name: the kinds the manifests use.
KINDS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "ServiceMonitor",
}

# Hand-written schemas of custom resources: type name -> (fields, required),
# fields mapping each JSON name to a type in the models' notation (a model
# class, a name in CUSTOM_TYPES, list[T], dict(str, T) or a primitive).
# ServiceMonitor is prometheus-operator's monitoring.coreos.com/v1 type
# (pkg/apis/monitoring/v1/servicemonitor_types.go and types.go), cut down
# to the fields a gpumux manifest may reasonably use; a field outside it is
# reported like an unknown Kubernetes field, so add it here (with its type
# from those files) before using it.
CUSTOM_TYPES = {
    "ServiceMonitor": ({
        "apiVersion": "str",
        "kind": "str",
        "metadata": "V1ObjectMeta",
        "spec": "ServiceMonitorSpec",
    }, ["spec"]),
    "ServiceMonitorSpec": ({
        "selector": "V1LabelSelector",
        "namespaceSelector": "NamespaceSelector",
        "endpoints": "list[Endpoint]",
        "jobLabel": "str",
        "targetLabels": "list[str]",
        "podTargetLabels": "list[str]",
    }, ["selector", "endpoints"]),
    "NamespaceSelector": ({
        "any": "bool",
        "matchNames": "list[str]",
    }, []),
    "Endpoint": ({
        "port": "str",
        "targetPort": "object",
        "path": "str",
        "scheme": "str",
        "interval": "str",
        "scrapeTimeout": "str",
        "honorLabels": "bool",
        "honorTimestamps": "bool",
        "relabelings": "list[RelabelConfig]",
        "metricRelabelings": "list[RelabelConfig]",
    }, []),
    "RelabelConfig": ({
        "sourceLabels": "list[str]",
        "separator": "str",
        "targetLabel": "str",
        "regex": "str",
        "modulus": "int",
        "replacement": "str",
        "action": "str",
    }, []),
}

# Fields of type resource.Quantity, strings in the models, which the API
# also takes as YAML numbers (cpu: 1).
QUANTITY_MAPS = {"limits", "requests", "overhead", "capacity", "hard"}
QUANTITY_FIELDS = {"sizeLimit"}

LIST = re.compile(r"^list\[(.+)\]$")
DICT = re.compile(r"^dict\(str, (.+)\)$")
PRIMITIVES = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "date": (str,),
    "datetime": (str,),
    "object": None,  # any value (IntOrString, RawExtension)
}
NUMBERS = (int, float)

CONFIGURATION = client.Configuration()  # client_side_validation on


class Checker:
    def __init__(self):
        self.errors = []
        self.required_cache = {}

    def error(self, where, path, message):
        self.errors.append(f"{where}: {path or '(object)'}: {message}")

    def required_of(self, klass):
        """The attributes whose setter refuses None: the model's required fields."""
        if klass not in self.required_cache:
            probe = klass.__new__(klass)
            probe.local_vars_configuration = CONFIGURATION
            required = set()
            for attribute in klass.openapi_types:
                try:
                    setattr(probe, attribute, None)
                except ValueError:
                    required.add(attribute)
            self.required_cache[klass] = required
        return self.required_cache[klass]

    def walk(self, where, path, value, type_name, field=None):
        """Checks `value` against `type_name`; returns it built (models for model types)."""
        if value is None:
            return None
        match = LIST.match(type_name)
        if match:
            if not isinstance(value, list):
                self.error(where, path,
                           f"expected a list ({type_name}), got {type(value).__name__}")
                return None
            return [self.walk(where, f"{path}[{i}]", item, match.group(1), field)
                    for i, item in enumerate(value)]
        match = DICT.match(type_name)
        if match:
            if not isinstance(value, dict):
                self.error(where, path,
                           f"expected a map ({type_name}), got {type(value).__name__}")
                return None
            inner = match.group(1)
            return {k: self.walk(where, f'{path}["{k}"]', v, inner, field)
                    for k, v in value.items()}
        if type_name in PRIMITIVES:
            return self.primitive(where, path, value, type_name, field)
        if type_name in CUSTOM_TYPES:
            return self.custom(where, path, value, type_name)
        return self.model(where, path, value, type_name)

    def primitive(self, where, path, value, type_name, field):
        allowed = PRIMITIVES[type_name]
        if allowed is None:
            return value
        if type_name == "str" and field in QUANTITY_MAPS | QUANTITY_FIELDS and \
                isinstance(value, NUMBERS) and not isinstance(value, bool):
            return value
        if isinstance(value, bool) and bool not in allowed:
            ok = False
        else:
            ok = isinstance(value, allowed)
        if not ok:
            self.error(where, path, f"expected {type_name}, got {type(value).__name__} {value!r}")
        return value

    def custom(self, where, path, value, type_name):
        fields, required = CUSTOM_TYPES[type_name]
        if not isinstance(value, dict):
            self.error(where, path, f"expected an object ({type_name}), got {type(value).__name__}")
            return None
        for name, item in value.items():
            child = f"{path}.{name}" if path else name
            if name not in fields:
                self.error(where, child, f"unknown field of {type_name} (the hand-written schema "
                           "in check_kubernetes_schema.py)")
                continue
            self.walk(where, child, item, fields[name], name)
        for name in required:
            if value.get(name) is None:
                self.error(where, f"{path}.{name}" if path else name,
                           f"required field of {type_name} missing")
        return value

    def model(self, where, path, value, type_name):
        klass = getattr(models, type_name, None)
        if klass is None:
            self.error(where, path, f"no model class {type_name} in python3-kubernetes")
            return None
        if not isinstance(value, dict):
            self.error(where, path, f"expected an object ({type_name}), got {type(value).__name__}")
            return None
        by_json = {json: attribute for attribute, json in klass.attribute_map.items()}
        built = {}
        for name, item in value.items():
            child = f"{path}.{name}" if path else name
            attribute = by_json.get(name)
            if attribute is None:
                newer = NEWER_FIELDS.get((type_name, name))
                if newer is None:
                    self.error(where, child, f"unknown field of {type_name} (Kubernetes 1.22); "
                               "a field of a newer release must be listed in NEWER_FIELDS")
                continue
            built[attribute] = self.walk(where, child, item, klass.openapi_types[attribute], name)
        # Built through the setters, as the client's deserializer does, but
        # one setter at a time so that every refused field is reported.
        instance = klass.__new__(klass)
        instance.local_vars_configuration = CONFIGURATION
        instance.discriminator = None
        for attribute in klass.openapi_types:
            try:
                setattr(instance, attribute, built.get(attribute))
            except ValueError as e:
                name = klass.attribute_map[attribute]
                self.error(where, f"{path}.{name}" if path else name,
                           f"required field of {type_name} missing ({e})")
        return instance

    def check_object(self, source, index, document):
        if not isinstance(document, dict):
            self.error(f"{source} document {index}", "", "not an object")
            return
        api_version, kind = document.get("apiVersion"), document.get("kind")
        metadata = document.get("metadata") or {}
        name = metadata.get("name") if isinstance(metadata, dict) else None
        namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
        where = f"{source}: {kind} {namespace + '/' if namespace else ''}{name}"
        type_name = KINDS.get((api_version, kind))
        if type_name is None:
            self.error(where, "", f"no schema for apiVersion {api_version!r} kind {kind!r}; "
                       "add it to KINDS (or CUSTOM_TYPES) in check_kubernetes_schema.py")
            return
        if not name:
            self.error(where, "metadata.name", "required: every object needs a name")
        self.walk(where, "", document, type_name)


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    checker = Checker()
    objects = 0
    for source in argv[1:]:
        stream = sys.stdin if source == "-" else open(source, encoding="utf-8")
        with stream:
            try:
                documents = list(yaml.safe_load_all(stream))
            except yaml.YAMLError as e:
                checker.error(source, "", f"not YAML: {e}")
                continue
        for index, document in enumerate(documents):
            if document is None:
                continue
            objects += 1
            checker.check_object(source if source != "-" else "stdin", index, document)
    for message in checker.errors:
        print(message)
    if objects == 0:
        print("check_kubernetes_schema: no objects to check", file=sys.stderr)
        return 1
    print(f"check_kubernetes_schema: {objects} objects, {len(checker.errors)} errors")
    return 1 if checker.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
