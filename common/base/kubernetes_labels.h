#pragma once

// The Kubernetes identity a session's labels may carry: its pod, namespace
// and container, each under a short key ("pod", "namespace", "container") or
// the one the container runtime labels containers with
// ("io.kubernetes.pod.name", "io.kubernetes.pod.namespace",
// "io.kubernetes.container.name"). /metrics and `gpumux top` show them.

#include <map>
#include <string>

namespace gpumux {

struct KubernetesIdentity {
  std::string pod;
  std::string pod_namespace;
  std::string container;
};

// Empty fields for keys the labels lack; the short key wins over the long.
KubernetesIdentity KubernetesIdentityOf(const std::map<std::string, std::string>& labels);

}  // namespace gpumux
