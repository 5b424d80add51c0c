# Optional: let the publish role into an EKS cluster. By default the access entry only maps the role
# to Kubernetes groups (topocast:publishers), which infra/k8s/rbac.yaml binds to exactly what the
# publisher does; an EKS access policy can be associated on top.

resource "aws_eks_access_entry" "publish" {
  count = var.eks_cluster_name == null ? 0 : 1

  cluster_name      = var.eks_cluster_name
  principal_arn     = aws_iam_role.this["publish"].arn
  kubernetes_groups = var.eks_kubernetes_groups
  type              = "STANDARD"
  tags              = local.common_tags
}

resource "aws_eks_access_policy_association" "publish" {
  count = var.eks_cluster_name != null && var.eks_access_policy_arn != null ? 1 : 0

  cluster_name  = var.eks_cluster_name
  principal_arn = aws_eks_access_entry.publish[0].principal_arn
  policy_arn    = var.eks_access_policy_arn

  access_scope {
    type = "cluster"
  }
}

# topology_source = k8s-labels (or a k8s-labels overlay): the discover role lists the nodes (RBAC: `list
# nodes` of topocast:publishers)
resource "aws_eks_access_entry" "discover" {
  count = var.eks_cluster_name != null && local.k8s_reader ? 1 : 0

  cluster_name      = var.eks_cluster_name
  principal_arn     = aws_iam_role.this["discover"].arn
  kubernetes_groups = var.eks_kubernetes_groups
  type              = "STANDARD"
  tags              = local.common_tags
}
