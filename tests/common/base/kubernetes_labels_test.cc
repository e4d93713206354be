// The Kubernetes identity in a session's labels.

#include "common/base/kubernetes_labels.h"

#include "gtest/gtest.h"

namespace gpumux {
namespace {

TEST(KubernetesLabelsTest, ShortKeysWinOverTheRuntimes) {
  KubernetesIdentity id = KubernetesIdentityOf({{"io.kubernetes.pod.name", "long"},
                                                {"pod", "short"},
                                                {"io.kubernetes.pod.namespace", "ns"},
                                                {"io.kubernetes.container.name", "c"}});
  EXPECT_EQ(id.pod, "short");
  EXPECT_EQ(id.pod_namespace, "ns");
  EXPECT_EQ(id.container, "c");
  KubernetesIdentity none = KubernetesIdentityOf({{"app", "x"}});
  EXPECT_EQ(none.pod, "");
  EXPECT_EQ(none.pod_namespace, "");
  EXPECT_EQ(none.container, "");
}

}  // namespace
}  // namespace gpumux
