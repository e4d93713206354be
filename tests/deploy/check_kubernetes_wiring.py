#!/usr/bin/python3
"""Checks that rendered gpumux manifests fit together.

  check_kubernetes_wiring.py --daemon RENDER [--client RENDER]

RENDER is the output of `kubectl kustomize` (multi-document YAML). The
daemon's render must hold one DaemonSet, whose container has
--socket=PATH with PATH's directory mounted from a hostPath volume, and a
Service and a ServiceMonitor: the Service must select the DaemonSet's pod
labels and name its container ports, the ServiceMonitor must select the
Service and name its ports. In the client's render, every pod whose
container sets GPUMUX_ADDRESS must reach the daemon's socket: the same host
directory and file, mounted; the daemon's gid among its groups; the host
PID and IPC namespaces where the daemon's pod has them (legacy CUDA IPC);
and GPUMUX_LABELS set. In both, every $(VAR) in an env value must name a
variable defined earlier in the same container, the only ones Kubernetes
expands. Prints each problem; exit status 1 when there is one.
"""

import argparse
import posixpath
import re
import sys

import yaml

# $(NAME) not preceded by another $ ($$(NAME) is the escape for a literal).
REFERENCE = re.compile(r"(?<!\$)\$\(([^)]*)\)")
POD_KINDS = {"DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"}


def load(path):
    with open(path, encoding="utf-8") as stream:
        return [d for d in yaml.safe_load_all(stream) if d]


def name_of(obj):
    meta = obj.get("metadata", {})
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}"


def pod_spec(obj):
    return obj.get("spec", {}).get("template", {}).get("spec", {})


def containers(spec):
    return spec.get("initContainers", []) + spec.get("containers", [])


class Wiring:
    def __init__(self):
        self.problems = []

    def problem(self, source, message):
        self.problems.append(f"{source}: {message}")

    def check_env_order(self, source, objects):
        for obj in objects:
            if obj.get("kind") not in POD_KINDS:
                continue
            for container in containers(pod_spec(obj)):
                defined = []
                for env in container.get("env", []):
                    for reference in REFERENCE.findall(str(env.get("value", ""))):
                        if reference not in defined:
                            self.problem(
                                source, f"{name_of(obj)} container {container['name']}: "
                                f"{env['name']} refers to $({reference}), which no earlier env "
                                "entry defines (Kubernetes leaves it unexpanded)")
                    defined.append(env["name"])

    def socket_of(self, source, obj, spec, container, path):
        """The hostPath directory holding `path` in `container`, or None (reported)."""
        directory = posixpath.dirname(path)
        mounts = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == directory]
        if not mounts:
            self.problem(source, f"{name_of(obj)}: no volume is mounted at {directory}, the "
                         f"directory of the socket {path}")
            return None
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        volume = volumes.get(mounts[0]["name"], {})
        if "hostPath" not in volume:
            self.problem(source, f"{name_of(obj)}: {directory} (socket {path}) is volume "
                         f"{mounts[0]['name']}, not a hostPath volume")
            return None
        return volume["hostPath"]["path"]

    def check_daemon(self, source, objects):
        """Returns facts of the daemon's pod for check_client, or None."""
        daemonsets = [o for o in objects if o.get("kind") == "DaemonSet"]
        if len(daemonsets) != 1:
            self.problem(source, f"expected one DaemonSet, found {len(daemonsets)}")
            return None
        daemonset = daemonsets[0]
        namespace = daemonset["metadata"].get("namespace")
        spec = pod_spec(daemonset)
        pod_labels = daemonset["spec"]["template"]["metadata"].get("labels", {})
        selector = daemonset["spec"]["selector"].get("matchLabels", {})
        if not selector.items() <= pod_labels.items():
            self.problem(source, f"{name_of(daemonset)}: selector {selector} does not match its "
                         f"pod labels {pod_labels}")

        facts = None
        has_socket = False
        for container in spec.get("containers", []):
            sockets = [a.split("=", 1)[1] for a in container.get("args", [])
                       if a.startswith("--socket=")]
            if not sockets:
                continue
            has_socket = True
            host_dir = self.socket_of(source, daemonset, spec, container, sockets[0])
            if host_dir is not None:
                context = container.get("securityContext", {})
                facts = {
                    "host_path": posixpath.join(host_dir, posixpath.basename(sockets[0])),
                    "gid": context.get("runAsGroup", spec.get("securityContext", {})
                                       .get("runAsGroup")),
                    "uid": context.get("runAsUser", spec.get("securityContext", {})
                                       .get("runAsUser")),
                    "hostPID": spec.get("hostPID", False),
                    "hostIPC": spec.get("hostIPC", False),
                }
        if not has_socket:
            self.problem(source, f"{name_of(daemonset)}: no container has --socket=PATH in args")
        port_names = {p["name"]: p["containerPort"] for c in spec.get("containers", [])
                      for p in c.get("ports", []) if "name" in p}

        services = [o for o in objects if o.get("kind") == "Service"]
        if not services:
            self.problem(source, "no Service")
        for service in services:
            wanted = service["spec"].get("selector", {})
            if not wanted or not wanted.items() <= pod_labels.items() or \
                    service["metadata"].get("namespace") != namespace:
                self.problem(source, f"{name_of(service)}: selector {wanted} does not select the "
                             f"pods of {name_of(daemonset)} (labels {pod_labels})")
            for port in service["spec"].get("ports", []):
                target = port.get("targetPort", port.get("port"))
                if target not in port_names and target not in port_names.values():
                    self.problem(source, f"{name_of(service)}: port {port.get('name')} targets "
                                 f"{target!r}, which is no container port of the DaemonSet "
                                 f"({port_names})")

        monitors = [o for o in objects if o.get("kind") == "ServiceMonitor"]
        if not monitors:
            self.problem(source, "no ServiceMonitor")
        for monitor in monitors:
            wanted = monitor["spec"].get("selector", {}).get("matchLabels", {})
            chosen = [s for s in services
                      if wanted and wanted.items() <= s["metadata"].get("labels", {}).items()
                      and s["metadata"].get("namespace") == monitor["metadata"].get("namespace")]
            if not chosen:
                self.problem(source, f"{name_of(monitor)}: selector {wanted} selects no Service "
                             "of its namespace")
                continue
            ports = {p.get("name") for s in chosen for p in s["spec"].get("ports", [])}
            for endpoint in monitor["spec"].get("endpoints", []):
                if endpoint.get("port") not in ports:
                    self.problem(source, f"{name_of(monitor)}: endpoint port "
                                 f"{endpoint.get('port')!r} is no port of the Service ({ports})")
        return facts

    def check_client(self, source, objects, daemon):
        clients = 0
        for obj in objects:
            if obj.get("kind") not in POD_KINDS:
                continue
            spec = pod_spec(obj)
            for container in spec.get("containers", []):
                env = {e["name"]: e for e in container.get("env", [])}
                if "GPUMUX_ADDRESS" not in env:
                    continue
                clients += 1
                where = f"{name_of(obj)} container {container['name']}"
                address = env["GPUMUX_ADDRESS"].get("value", "")
                if not address.startswith("unix://"):
                    self.problem(source, f"{where}: GPUMUX_ADDRESS {address!r} is not unix://PATH")
                    continue
                path = address[len("unix://"):]
                host_dir = self.socket_of(source, obj, spec, container, path)
                if host_dir is not None and daemon is not None:
                    host_path = posixpath.join(host_dir, posixpath.basename(path))
                    if host_path != daemon["host_path"]:
                        self.problem(source, f"{where}: its socket is {host_path} on the host, the "
                                     f"daemon's {daemon['host_path']}")
                if "GPUMUX_LABELS" not in env:
                    self.problem(source, f"{where}: no GPUMUX_LABELS")
                if daemon is None:
                    continue
                context = spec.get("securityContext", {})
                groups = set(context.get("supplementalGroups", []))
                groups.add(container.get("securityContext", {}).get(
                    "runAsGroup", context.get("runAsGroup")))
                uid = container.get("securityContext", {}).get("runAsUser",
                                                               context.get("runAsUser"))
                if daemon["gid"] not in groups and uid != daemon["uid"]:
                    self.problem(source, f"{where}: gid {daemon['gid']} (the socket's group) is "
                                 f"not among its groups {sorted(g for g in groups if g)}")
                for namespace in ("hostPID", "hostIPC"):
                    if daemon[namespace] and not spec.get(namespace, False):
                        self.problem(source, f"{where}: the daemon's pod sets {namespace} (legacy "
                                     "CUDA IPC), the client's pod does not")
        if clients == 0:
            self.problem(source, "no container sets GPUMUX_ADDRESS")


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--client")
    options = parser.parse_args()
    wiring = Wiring()
    daemon_objects = load(options.daemon)
    wiring.check_env_order(options.daemon, daemon_objects)
    daemon = wiring.check_daemon(options.daemon, daemon_objects)
    if options.client:
        client_objects = load(options.client)
        wiring.check_env_order(options.client, client_objects)
        wiring.check_client(options.client, client_objects, daemon)
    for problem in wiring.problems:
        print(problem)
    return 1 if wiring.problems else 0


if __name__ == "__main__":
    sys.exit(main())
