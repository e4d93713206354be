#include "common/base/kubernetes_labels.h"

#include <initializer_list>

namespace gpumux {
namespace {

std::string FirstOf(const std::map<std::string, std::string>& labels,
                    std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = labels.find(key);
    if (it != labels.end() && !it->second.empty()) return it->second;
  }
  return "";
}

}  // namespace

KubernetesIdentity KubernetesIdentityOf(const std::map<std::string, std::string>& labels) {
  return KubernetesIdentity{
      .pod = FirstOf(labels, {"pod", "io.kubernetes.pod.name"}),
      .pod_namespace = FirstOf(labels, {"namespace", "io.kubernetes.pod.namespace"}),
      .container = FirstOf(labels, {"container", "io.kubernetes.container.name"}),
  };
}

}  // namespace gpumux
